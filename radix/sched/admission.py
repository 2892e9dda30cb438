"""Admission: which sorted waiting requests join this round's prefill, and decode retraction.

Follows SGLang 0.5.23's `PrefillAdder`, `PrefillBudget` (one page held per request) and
`ScheduleBatch.retract_decode`: a per-round input budget (`rem_input_tokens`), a chunk
budget, a memory budget of free + evictable slots minus what admitted and running requests will
still need, a lock on each admitted prefix, and retraction of running requests (their new suffix
released, never inserted) when a decode step cannot get its slots.
Leaves out: ignore_eos admission, host-cache load-back, mixed chunks, priority preemption.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from radix.events import AdmissionStopped, Event, EventSink, RequestAdmitted, RequestRetracted
from radix.request import Req
from radix.sched.policy import request_key
from radix.tokens import head, mutable_copy

CLIP_MAX_NEW_TOKENS = 4096  # SGLang clips the max_new_tokens estimate at this
RETRACT_DECODE_STEPS = 20  # SGLang's global_config.retract_decode_steps


class AddReqResult(Enum):
    CONTINUE = "continue"  # keep adding
    NO_TOKEN = "no_token"  # out of memory (free + evictable slots)
    OTHER = "other"  # out of the round's input or chunk budget


def match_for_admission(tree_cache: Any, req: Req) -> None:
    """SGLang 0.5.23's `init_next_round_input`: fill_ids = prompt + output, match all but the
    last token (_compute_max_prefix_len: the forward needs at least one), store the (unlocked)
    match on the request.

    A prompt of 5 tokens fully cached matches 4: one token must be computed to get logits.
    """
    req.fill_ids = req.all_ids
    match = tree_cache.match_prefix(
        request_key(req, req.fill_ids[: len(req.fill_ids) - 1]), rid=req.rid
    )
    req.prefix_indices = mutable_copy(match.slot_ids)  # compact slots stay compact
    req.last_node = match.last_node


class PrefillAdder:
    """Builds one prefill batch (`can_run_list`) under SGLang's three budgets.

    Two 3,000-token prompts, max_prefill_tokens 4,096, chunking off: the first is admitted
    whatever its size (SGLang lets the first request exceed the cap), leaving 1,096; the second
    needs 3,000 >= 1,096 and stops the round with OTHER.
    """

    def __init__(
        self,
        tree_cache: Any,
        allocator: Any,
        running: Sequence[Req],
        *,
        rem_input_tokens: int = 16384,  # max_prefill_tokens
        rem_chunk_tokens: int | None = None,  # chunked_prefill_size; None disables chunking
        new_token_ratio: float = 0.7,
        page_size: int = 1,
        sink: EventSink | None = None,
        reserved_outputs: int | None = None,
    ) -> None:
        self.tree_cache = tree_cache
        self.allocator = allocator
        self.page_size = page_size
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = rem_input_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        self.can_run_list: list[Req] = []
        self.extend_lens: list[int] = []  # per admitted request, tokens to prefill
        self.new_chunked_req: Req | None = None
        self.log_hit_tokens = 0
        self.log_input_tokens = 0
        self.stop_reason: str | None = None  # why the last request was not admitted
        self._sink = sink
        # Tokens the running requests may still generate (estimated by new_token_ratio).
        # NOTE: the ratio times the integer sum, one rounding; SGLang rounds each request's
        # product and adds the floats, which can differ in the last bits, never more.
        # `reserved_outputs`: that sum, when the caller keeps it (radix/sched/ledger.py).
        if reserved_outputs is None:
            reserved_outputs = sum(min(r.max_new_tokens - len(r.output_ids), CLIP_MAX_NEW_TOKENS)
                                   for r in running)
        self.rem_total_token_offset = new_token_ratio * reserved_outputs
        self.cur_rem_token_offset = 0

    @property
    def rem_total_tokens(self) -> float:
        return (self.allocator.available_size() + self.tree_cache.evictable_size()
                - self.rem_total_token_offset)

    @property
    def cur_rem_tokens(self) -> float:
        return (self.allocator.available_size() + self.tree_cache.evictable_size()
                - self.cur_rem_token_offset)

    def ceil_paged(self, n: int) -> int:
        return -(-n // self.page_size) * self.page_size

    def budget_state(self) -> AddReqResult:
        if self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0:
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (
                self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _update_budget(self, prefix_len: int, extend_len: int, max_new_tokens: int) -> None:
        paged = self.ceil_paged(extend_len)
        # SGLang's PrefillBudget.reserve also holds one page per request (alloc_extend's overhead)
        self.rem_total_token_offset += paged + self.page_size + max_new_tokens
        self.cur_rem_token_offset += paged + self.page_size
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged
        self.log_hit_tokens += prefix_len
        self.log_input_tokens += extend_len

    def _admit(self, req: Req, prefix_len: int, extend_len: int, chunked: bool) -> None:
        req.fill_ids = head(req.fill_ids, prefix_len + extend_len)
        self.can_run_list.append(req)
        self.extend_lens.append(extend_len)
        if chunked:
            self.new_chunked_req = req
        self._emit(RequestAdmitted(req.rid, prefix_len, extend_len, chunked,
                                   self.rem_input_tokens))

    def add_chunked_req(self, req: Req) -> Req | None:
        """Continues the request whose prompt is mid-chunk (its prefix is already locked).
        Returns it while more chunks remain, else None."""
        remaining = len(req.all_ids) - len(req.prefix_indices)
        limit = remaining if self.rem_chunk_tokens is None else self.rem_chunk_tokens
        if int(self.rem_total_tokens) > 0:  # SGLang's available_chunk_tokens
            limit = min(limit, int(self.rem_total_tokens))
        truncated = remaining > limit
        extend_len = (limit // self.page_size * self.page_size) if truncated else remaining
        return self._admit_chunk(req, extend_len, truncated)

    def _admit_chunk(self, req: Req, extend_len: int, truncated: bool) -> Req | None:
        """Admits the next `extend_len` tokens of the request mid-chunk (budgets, then
        `_admit`); returns it while more chunks remain (`truncated`), else None."""
        req.fill_ids = req.all_ids
        max_new = 0 if truncated else min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        self._update_budget(0, extend_len, max_new)
        self._admit(req, len(req.prefix_indices), extend_len, truncated)
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """Admits `req` (matched by `match_for_admission`) or says why not. On admission the
        matched prefix is locked (`inc_lock_ref`); its slots are allocated later, by the caller."""
        prefix_len = len(req.prefix_indices)
        extend = len(req.fill_ids) - prefix_len
        max_new = min(max(req.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)
        total_tokens = extend + max_new + self.page_size  # SGLang: + per_req_token_overhead
        input_tokens = self.ceil_paged(extend)
        if total_tokens >= self.rem_total_tokens:
            return self._stop(req, AddReqResult.NO_TOKEN,
                              f"needs {total_tokens} > {self.rem_total_tokens:.0f} free+evictable")
        if self.rem_chunk_tokens is None and self.can_run_list and (
                input_tokens >= self.rem_input_tokens):  # with chunking, budget_state decides
            return self._stop(req, AddReqResult.OTHER,
                              f"needs {input_tokens} >= {self.rem_input_tokens} input budget left")
        self.tree_cache.inc_lock_ref(req.last_node)  # evictable shrinks by the locked prefix
        if total_tokens >= self.rem_total_tokens:
            self.tree_cache.dec_lock_ref(req.last_node)
            return self._stop(req, AddReqResult.NO_TOKEN, "no room once its prefix is locked")
        if self.rem_chunk_tokens is None or input_tokens <= self.rem_chunk_tokens:
            # SGLang reserves the full max_new_tokens here, outputs so far not subtracted
            self._update_budget(prefix_len, extend, min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS))
            self._admit(req, prefix_len, extend, chunked=False)
        else:
            trunc_len = self.rem_chunk_tokens // self.page_size * self.page_size
            if trunc_len <= 0:
                self.tree_cache.dec_lock_ref(req.last_node)
                return self._stop(req, AddReqResult.OTHER, "chunk budget spent")
            self._update_budget(prefix_len, trunc_len, 0)
            self._admit(req, prefix_len, trunc_len, chunked=True)
        req.cache_protected_len = prefix_len
        return self.budget_state()

    def _stop(self, req: Req, result: AddReqResult, reason: str) -> AddReqResult:
        self.stop_reason = f"{req.rid}: {reason}"
        self._emit(AdmissionStopped(req.rid, result.value, reason))
        return result

    def _emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink.emit(event)


def evict_shortfall(tree_cache: Any, allocator: Any, num_tokens: int) -> int:
    """SGLang 0.5.23's evict_from_tree_cache: evicts only what the allocator lacks,
    max(0, num_tokens - available_size()), never num_tokens itself. Returns tokens evicted.

    8 free slots, 10 wanted, 30 evictable: the tree is asked for 2 (it may free a whole leaf).
    """
    shortfall = num_tokens - allocator.available_size()
    if shortfall <= 0 or tree_cache.disable:
        return 0
    return tree_cache.evict(shortfall).num_evicted


def _take(allocator: Any, row: list[int], num_tokens: int, tree_cache: Any) -> list[int]:
    """Slots continuing `row` (a paged allocator first fills the row's last page)."""
    extend = getattr(allocator, "alloc_extend", None)
    if extend is not None:
        slots = extend(row[-1] if row else None, num_tokens)
    else:
        slots = allocator.alloc(num_tokens)
    if slots is None:
        raise MemoryError(f"out of KV slots: {num_tokens} wanted, "
                          f"{allocator.available_size()} free, "
                          f"{tree_cache.evictable_size()} evictable")
    return slots


def alloc_for_extend(tree_cache: Any, allocator: Any, reqs: Sequence[Req],
                     extend_lens: Sequence[int]) -> int:
    """A prefill batch's slots: one eviction for the batch's demand, then each request's row
    becomes prefix_indices + its new slots. Demand as SGLang 0.5.23: the extend tokens, plus
    one page per request when page_size > 1 (alloc_paged_token_slots_extend's over-estimate).
    Returns tokens evicted.

    Page 16, two requests extending 20 and 5 tokens, 30 free: demand 25 + 2 * 16 = 57, so 27
    are evicted first.
    """
    ps = tree_cache.page_size
    demand = sum(extend_lens) + (len(reqs) * ps if ps > 1 else 0)
    evicted = evict_shortfall(tree_cache, allocator, demand)
    for req, n in zip(reqs, extend_lens, strict=True):
        row = mutable_copy(req.prefix_indices)  # compact prefixes stay compact (radix/tokens/)
        req.slot_ids = row + _take(allocator, row, n, tree_cache)
    return evicted


def alloc_for_decode(tree_cache: Any, allocator: Any, reqs: Sequence[Req]) -> int:
    """One slot per running request, appended to its row, after evicting the shortfall of
    len(reqs) tokens (page_size > 1: len(reqs) pages, SGLang's over-estimate that every
    request starts a page). Returns tokens evicted."""
    ps = tree_cache.page_size
    evicted = evict_shortfall(tree_cache, allocator, len(reqs) * ps)
    after = allocator.next_after if getattr(allocator, "runs", False) else None
    for req in reqs:
        if not grow_in_place(after, req.slot_ids, 1):
            req.slot_ids += _take(allocator, req.slot_ids, 1, tree_cache)
    return evicted


def grow_in_place(next_after: Any, row: Any, num_tokens: int) -> bool:
    """Appends `num_tokens` slots to `row` in place when a run allocator (its `next_after`)
    can continue the row's run: what alloc_extend would hand out, without building a
    TokenRuns; False (row unchanged) when there is no such allocator or it cannot."""
    first = next_after(row[-1], num_tokens) if next_after is not None and len(row) else None
    if first is None:
        return False
    row.extend(range(first, first + num_tokens))  # a RunList extends a range as one run
    return True


def decode_tokens_needed(reqs: Sequence[Req], page_size: int) -> int:
    """SGLang's new_tokens_required_next_decode: a page for each request whose committed KV
    (its row) fills whole pages; page 1: one token per request.

    >>> full, partial = Req("a", [1], slot_ids=[1] * 16), Req("b", [1], slot_ids=[1] * 5)
    >>> decode_tokens_needed([full, partial], 16)
    16
    """
    return sum(1 for r in reqs if len(r.slot_ids) % page_size == 0) * page_size


def check_decode_mem(tree_cache: Any, allocator: Any, reqs: Sequence[Req]) -> bool:
    """SGLang 0.5.23's check_decode_mem: evicts the shortfall of the next decode step's
    tokens (decode_tokens_needed), then says whether they fit.

    4 running requests, page 1, 2 free slots: evict(2) is asked of the tree, then 4 <= free.
    """
    num_tokens = decode_tokens_needed(reqs, tree_cache.page_size)
    evict_shortfall(tree_cache, allocator, num_tokens)
    return allocator.available_size() >= num_tokens


def release_req(tree_cache: Any, allocator: Any, req: Req) -> int:
    """Retracts one request as SGLang 0.5.23's release_req: release_kv_cache with
    checkpoint=False (nothing inserted: its slots past the tree-owned prefix are freed, its
    lock dropped), then resets it for a later re-prefill. Returns the slots freed."""
    freed = len(req.slot_ids) - req.cache_protected_len
    tree_cache.release_kv_cache(req, checkpoint=False)
    req.slot_ids, req.prefix_indices, req.fill_ids = [], [], []
    req.last_node, req.cache_protected_len, req.cache_inserted_len = None, 0, 0
    req.metrics["retractions"] = req.metrics.get("retractions", 0) + 1
    return freed


def retraction_order(running: Sequence[Req]) -> list[int]:
    """Indices, most worth keeping first; retraction pops from the end: fewest outputs go
    first, then the longest prompt (SGLang's _get_decode_retraction_order).

    Outputs 5, 1, 1 with prompts 10, 30, 20: [0, 2, 1], so request 1 goes first, then 2.
    >>> retraction_order([Req("a", [0] * 10, [0] * 5), Req("b", [0] * 30, [0]),
    ...                   Req("c", [0] * 20, [0])])
    [0, 2, 1]
    """
    return sorted(range(len(running)), reverse=True,
                  key=lambda i: (len(running[i].output_ids), -len(running[i].origin_input_ids)))


def retract_decode(tree_cache: Any, allocator: Any, running: list[Req],
                   sink: EventSink | None = None, *, check: Any = check_decode_mem,
                   evict: Any = evict_shortfall) -> tuple[list[Req], list[Req], float]:
    """When the next decode step cannot get its slots, retract requests in retraction_order
    until it can; at least one goes, and the last one stays. After each, the tree is asked for
    the shortfall of 20 decode steps of those left. Returns (kept, retracted,
    new_token_ratio), as SGLang 0.5.23's retract_decode, with the ratio
    min(1, (outputs so far + 20 * kept) / (sum of max_new_tokens + 1)) over the kept ones.
    `check(tree, allocator, reqs)` and `evict(tree, allocator, tokens)` are the capacity check
    and the eviction (a hybrid tree's check and evict every pool: radix/sched/hybrid.py).
    """
    order = retraction_order(running)
    retracted: list[Req] = []
    first = True
    while first or not check(tree_cache, allocator, [running[i] for i in order]):
        if len(order) == 1:
            break
        first = False
        req = running[order.pop()]
        freed = release_req(tree_cache, allocator, req)
        retracted.append(req)
        if sink is not None:
            sink.emit(RequestRetracted(req.rid, freed, len(req.output_ids),
                                       "decode out of memory: released without insert"))
        evict(tree_cache, allocator, len(order) * RETRACT_DECODE_STEPS)
    if len(order) <= 1 and not check(tree_cache, allocator, [running[i] for i in order]):
        # SGLang aborts the last request here; check_fits makes it unreachable for us
        raise MemoryError("no KV slot left even for a single running request")
    keep = set(order)
    kept = [r for i, r in enumerate(running) if i in keep]
    decoded = sum(len(r.output_ids) for r in kept)
    max_new = sum(r.max_new_tokens for r in kept)
    ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(kept)) / (max_new + 1))
    return kept, retracted, ratio
