"""The scheduler over a hybrid model's tree: SGLang 0.5.23's scheduler steps and PrefillAdder
budgets for a UnifiedRadixCache with SWA and/or MAMBA components, through radix/tree/
hybrid_lifecycle.py's functions (the ones `serve` runs for one request): the match copied on
write, lock receipts, per-pool eviction, window frees, Mamba tracking, retraction (`HybridSteps`),
and the memory budget of mem_cache/prefill_budget.py (`HybridPrefillAdder`). Leaves out: the
unified (shared-byte) pools' Mamba gate, the per-request SWA ring, host hits, encoder replay,
DCP's chunk grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radix.events import EventSink
from radix.request import Req
from radix.sched.admission import CLIP_MAX_NEW_TOKENS, AddReqResult, PrefillAdder, retract_decode
from radix.tree import hybrid_lifecycle as life
from radix.tree.components.base import SWA
from radix.tree.hybrid_lifecycle import SchedulerKnobs

# kv_cache_configurator.py: state slots a running request may hold besides its tracking slots
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3


def is_hybrid_tree(tree_cache: Any) -> bool:
    """A UnifiedRadixCache (the component tree) rather than a RadixCache."""
    return hasattr(tree_cache, "req_states")


def estimate_swa_kv_tokens(extend_len: int, max_new_tokens: int, window: int, page_size: int,
                           allocation_limit: int | None = None) -> int:
    """SGLang's peak SWA reservation for one request: the prefill's slots past one window
    (at most `allocation_limit` of them are allocated this pass), then at most a window (and a
    page) held while it decodes.

    Window 7, page 1, a 32-token extend with 16 to decode: 25 + 7 + 1 = 33.
    >>> estimate_swa_kv_tokens(32, 16, 7, 1), estimate_swa_kv_tokens(32, 16, 7, 1, 10)
    (33, 11)
    """
    allocated = extend_len if allocation_limit is None else min(extend_len, allocation_limit)
    return max(allocated - window, 0) + min(extend_len + max_new_tokens, window) + page_size


class HybridPrefillAdder(PrefillAdder):
    """PrefillAdder over a UnifiedRadixCache, as SGLang 0.5.23's over its hybrid pools: the
    token budget counts the full pool (free + FULL evictable); with an SWA pool a request must
    also fit its SWA estimate under the SWA pool's free + SWA evictable less what this pass
    reserved (a prompt that can never fit the SWA pool is chunked to what fits); the match is
    pinned while admission decides, and an admitted request keeps its own lock receipt.

    SWA pool of 40 slots, window 7: a 50-token prompt needs 43 + 7 + 1 = 51 >= 40 SWA slots;
    with chunking on it is cut to 40 - (7 + 1) = 32 tokens this pass, without it waits.
    """

    def __init__(self, tree_cache: Any, allocator: Any, running: Sequence[Req],
                 **kw: Any) -> None:
        super().__init__(tree_cache, tree_cache.allocator, running, **kw)  # (the tree's pools)
        a = tree_cache.allocator
        self.swa = tree_cache.is_swa_enabled
        self._full_free = a.full_available_size if self.swa else a.available_size
        self.window = tree_cache.sliding_window_size
        self.size_swa = a.swa.size if self.swa else 0
        self.swa_offset = 0  # SWAPrefillBudget.swa_offset: what this pass's admissions reserved

    @property
    def rem_total_tokens(self) -> float:
        return (self._full_free() + self.tree_cache.evictable_size()
                - self.rem_total_token_offset)

    @property
    def cur_rem_tokens(self) -> float:
        return self._full_free() + self.tree_cache.evictable_size() - self.cur_rem_token_offset

    @property
    def remaining_swa(self) -> int:
        t = self.tree_cache
        return (t.allocator.swa_available_size() + t.component_evictable_size(SWA)
                - self.swa_offset)

    def swa_tokens(self, extend_len: int, max_new_tokens: int, limit: int | None = None) -> int:
        return estimate_swa_kv_tokens(extend_len, max_new_tokens, self.window, self.page_size,
                                      limit)

    def budget_state(self) -> AddReqResult:
        if self.swa and self.remaining_swa <= 0:
            return AddReqResult.NO_TOKEN
        return super().budget_state()

    def _update_budget(self, prefix_len: int, extend_len: int, max_new_tokens: int) -> None:
        if self.swa:  # (against the chunk budget before this admission spends it)
            self.swa_offset += self.swa_tokens(self.ceil_paged(extend_len), max_new_tokens,
                                               self.rem_chunk_tokens)
        super()._update_budget(prefix_len, extend_len, max_new_tokens)

    def add_chunked_req(self, req: Req) -> Req | None:
        """The request mid-chunk continues with what both pools allow (SWA: less a page);
        when the SWA pool allows nothing it waits, still the chunked request."""
        remaining = len(req.all_ids) - len(req.prefix_indices)
        limit = remaining if self.rem_chunk_tokens is None else self.rem_chunk_tokens
        limit = min(limit, int(self.rem_total_tokens))
        if self.swa:
            limit = min(limit, int(self.remaining_swa) - self.page_size)
            if limit <= 0:
                return req
        elif limit <= 0:
            limit = remaining if self.rem_chunk_tokens is None else self.rem_chunk_tokens
        return self._admit_chunk(req, min(remaining, limit), remaining > limit)

    def add_one_req(self, req: Req) -> AddReqResult:
        """Admits `req` (matched by HybridSteps.match) or says why not, deciding with its match
        pinned (SGLang's _lock_node); the admitted request keeps its own lock (lock_match)."""
        tree = self.tree_cache
        prefix_len = len(req.prefix_indices)
        extend = len(req.fill_ids) - prefix_len
        max_new = min(max(req.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)
        total_tokens = extend + max_new + self.page_size
        pin = tree.inc_lock_ref(req.last_node, rid=req.rid)
        try:
            chosen = self._select(req, prefix_len, extend, total_tokens, max_new)
            if isinstance(chosen, AddReqResult):
                return chosen
            extend_len, reserve_new, chunked = chosen
            life.lock_match(tree, req)
            self._update_budget(prefix_len, extend_len, reserve_new)
            self._admit(req, prefix_len, extend_len, chunked)
        finally:
            tree.dec_lock_ref(req.last_node, pin, rid=req.rid)
        return self.budget_state()

    def _select(self, req: Req, prefix_len: int, extend: int, total_tokens: int,
                max_new: int) -> tuple[int, int, bool] | AddReqResult:
        """(tokens to prefill, new tokens to reserve, chunked) or why not (select_prefill_
        admission with the budget's check_prefill)."""
        input_tokens = self.ceil_paged(extend)
        limit = self.rem_chunk_tokens
        if total_tokens >= self.rem_total_tokens:
            return self._stop(req, AddReqResult.NO_TOKEN,
                              f"needs {total_tokens} >= {self.rem_total_tokens:.0f} free+evictable")
        if self.swa:
            need, room = self.swa_tokens(input_tokens, max_new, limit), self.remaining_swa
            if need >= room:
                cap = 0
                if need >= self.size_swa:  # never fits whole: a smaller chunk may
                    headroom = self.swa_tokens(0, max_new)
                    cap = max(0, (int(room) - headroom) // self.page_size * self.page_size)
                if limit is None or cap <= 0:
                    return self._stop(req, AddReqResult.NO_TOKEN,
                                      f"needs {need} SWA slots >= {room} free+evictable")
                limit = min(limit, cap)
        if self.rem_chunk_tokens is None and self.can_run_list and (
                input_tokens >= self.rem_input_tokens):
            return self._stop(req, AddReqResult.OTHER,
                              f"needs {input_tokens} >= {self.rem_input_tokens} input budget left")
        if limit is None or input_tokens <= limit:
            return extend, min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS), False
        ps = self.page_size
        end = (prefix_len + limit // ps * ps) // ps * ps
        if end - prefix_len <= 0:
            return self._stop(req, AddReqResult.OTHER, "chunk budget spent")
        return end - prefix_len, 0, True


class HybridSteps:
    """What Scheduler does over a UnifiedRadixCache instead of a RadixCache, step by step
    (SGLang 0.5.23's scheduler, schedule_batch.py and allocation.py for hybrid trees)."""

    def __init__(self, cache: Any, knobs: SchedulerKnobs | None = None) -> None:
        self.cache = cache
        self.knobs = knobs or SchedulerKnobs()
        self.swa = cache.is_swa_enabled

    def running_cap(self, cap: int | None) -> int | None:
        """max_running_requests, capped as SGLang caps it by the Mamba state slots: each
        running request may hold 3 + its tracking slots (resolve_max_num_reqs)."""
        cache = self.cache
        if not cache.is_mamba_enabled:
            return cap
        per = MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + life.mamba_tracking_slots(
            cache, self.knobs)
        mamba_cap = cache.mamba_pool.size // per
        if mamba_cap < 1:
            raise ValueError(f"{cache.mamba_pool.size} Mamba state slots cannot serve a request "
                             f"({per} per running request): raise max_mamba_cache_size")
        return mamba_cap if cap is None else min(cap, mamba_cap)

    def check_fits(self, req: Req, full_slots: int, chunk: int | None) -> None:
        """ValueError when `req` can never be admitted: `full_slots` (check_fits' count) must
        be fewer than the full pool's slots; with an SWA pool, its SWA estimate must fit the
        SWA pool whole or, with chunked prefill, in chunks that leave room to decode
        (SWAPrefillBudget.swa_never_fits and its chunk cap, on an idle pool)."""
        cache = self.cache
        a, ps = cache.allocator, cache.page_size
        full = a.full.size if self.swa else a.size
        if full_slots >= full:
            raise ValueError(f"request {req.rid}: {len(req.origin_input_ids):,} prompt + "
                             f"{min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS):,} new tokens + a "
                             f"page of {ps} need a KV pool of more than {full_slots:,} slots; "
                             f"the full pool holds {full:,}")
        if not self.swa:
            return
        w, new = cache.sliding_window_size, min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        prompt = -(-len(req.origin_input_ids) // ps) * ps
        need = estimate_swa_kv_tokens(prompt, new, w, ps, chunk)
        if need < a.swa.size:
            return
        cap = (a.swa.size - estimate_swa_kv_tokens(0, new, w, ps)) // ps * ps
        if chunk is None or cap <= 0:
            how = ("; chunked prefill would cut it" if chunk is None and cap > 0 else "")
            raise ValueError(f"request {req.rid}: its prefill and decode need {need:,} SWA slots "
                             f"(window {w}); the SWA pool holds {a.swa.size:,}{how}")

    def match(self, tree_cache: Any, req: Req) -> None:
        """init_next_round_input: the match of all but the last token, copied on write."""
        req.fill_ids = req.all_ids
        life.match_kv_cache(tree_cache, req)

    def revert(self, req: Req) -> None:
        life.revert_match(self.cache, req)

    def alloc_for_extend(self, reqs: Sequence[Req], extend_lens: Sequence[int]) -> int:
        """A prefill batch's slots: the Mamba slots the batch lacks (one eviction), each
        request's row from its match, one KV eviction for the batch's demand (a page more
        per request when paged), then each extend's slots and Mamba tracking. Returns FULL
        tokens evicted."""
        cache, knobs = self.cache, self.knobs
        before = cache.total_size()
        life.ensure_mamba_capacity(cache, list(reqs), knobs)
        for req in reqs:
            life.alloc_req_slots(cache, req, knobs, ensured=True)
        ps = cache.page_size
        life.evict_to_free_tokens(cache, sum(extend_lens) + (len(reqs) * ps if ps > 1 else 0))
        for req, n in zip(reqs, extend_lens, strict=True):
            start = len(req.slot_ids)
            life.alloc_kv(cache, req, n, 0)
            life.begin_extend(cache, req, start, start + n)
        return before - cache.total_size()

    def check_decode(self, reqs: Sequence[Req]) -> bool:
        return life.check_decode_capacity(self.cache, list(reqs))

    def retract(self, running: list[Req], sink: EventSink | None) -> tuple[list[Req],
                                                                         list[Req], float]:
        """retract_decode with every pool's capacity check and eviction."""
        return retract_decode(self.cache, self.cache.allocator, running, sink,
                              check=lambda t, a, reqs: life.check_decode_capacity(t, reqs),
                              evict=lambda t, a, n: life.evict_to_free_tokens(t, n))

    def prepare_decode(self, reqs: list[Req]) -> None:
        life.prepare_decode(self.cache, reqs, self.knobs)

    def commit_decode(self, reqs: list[Req], tokens: Sequence[int]) -> None:
        life.commit_decode(self.cache, reqs, tokens, self.knobs)
