"""A request's way through a hybrid tree, as SGLang 0.5.23's scheduler drives it (common.py's
match_kv_cache, allocation.py's alloc_req_slots / alloc_for_extend / alloc_for_decode,
ScheduleBatch's Mamba tracking and maybe_evict_swa, the result processor's decode tracking),
one request at a time over a UnifiedRadixCache and its pools.

    match_kv_cache   the hit; copy-on-write of the node's Mamba state into the request's slot
    admit            lock the hit, the request's Mamba slots, KV for the first extend
    extend           KV for [start, end) (evicting the shortfall), track a Mamba state, and a
                     chunk's checkpoint (checkpoint_kv_cache)
    prepare_decode   SWA slots out of the window freed, one KV slot each (before the forward)
    commit_decode    the sampled tokens, Mamba decode tracking (after it); decode_step: both
    finish / retract release_kv_cache with or without the checkpoint

`serve` runs one request through them; radix/sched's Scheduler runs batches through the same
functions (radix/sched/hybrid.py). Leaves out: speculative decoding, the lazy extra buffer,
the overlap scheduler's one-step lag other than SWA's first decode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from radix import events as ev
from radix.request import Req
from radix.tokens import head
from radix.tree.components.base import MAMBA
from radix.tree.components.swa import free_swa_out_of_window_slots
from radix.tree.key import RadixKey
from radix.tree.unified_radix_cache import HybridMatchResult, UnifiedRadixCache


@dataclass(frozen=True)
class SchedulerKnobs:
    """The scheduler's side of SGLang's configuration (flags and env vars by their names)."""

    mamba_track_interval: int = 256  # --mamba-track-interval: decode keeps a state this often
    enable_overlap_schedule: bool = True  # not --disable-overlap-schedule: two ping-pong slots
    swa_eviction_interval: int = 128  # SGLANG_SWA_EVICTION_INTERVAL: decode frees SWA in steps
    release_prefill_swa: bool = False  # SGLANG_OPT_RELEASE_PREFILL_SWA: dec_swa_lock_only

    def __post_init__(self) -> None:
        for name in ("mamba_track_interval", "swa_eviction_interval"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")


def match_kv_cache(cache: UnifiedRadixCache, req: Req, cow_mamba: bool | None = None,
                   max_prefix_len: int | None = None) -> HybridMatchResult:
    """The match of req's prompt + output (at most max_prefix_len tokens, default all but
    one), adopted as its prefix; with a Mamba tree the node's state is copied on write into
    the request's own slot (allocated now, evicting a cached state if none is free)."""
    ids = req.all_ids
    limit = len(ids) - 1 if max_prefix_len is None else max_prefix_len
    key = RadixKey(ids[:max(limit, 0)], req.extra_key, req.cache_salt)
    result = cache.match_prefix(key, rid=req.rid)
    state = cache.kv_of(req)
    req.prefix_indices = result.slot_ids
    req.last_node = result.last_node
    req.cache_protected_len = result.prefix_len
    state.swa_branching_seqlen = result.swa_branching_seqlen
    state.mamba_branching_seqlen = result.mamba_branching_seqlen
    if (cache.is_mamba_enabled if cow_mamba is None else cow_mamba):
        _copy_on_write(cache, state, result.last_node)
    return result


def _copy_on_write(cache: UnifiedRadixCache, state, node) -> None:
    src = node.component_data[MAMBA].value if node is not cache.root_node else None
    if src is None:
        return
    if state.mamba_pool_idx is None:
        got = cache.mamba_pool.alloc(1)
        if got is None:  # pin the hit while a cached state makes room
            receipt = cache.inc_lock_ref(node)
            cache.evict_for_alloc(mamba_num=1)
            got = cache.mamba_pool.alloc(1)
            cache.dec_lock_ref(node, receipt)
            if got is None:
                raise RuntimeError("no Mamba state slot for the copy on write")
        state.mamba_pool_idx = got[0]
    state.mamba_cow_src_index = src[0]
    cache._emit(ev.MambaStateCopied(node.id, src[0], state.mamba_pool_idx))


def admit(cache: UnifiedRadixCache, req: Req, knobs: SchedulerKnobs) -> None:
    """Locks the match (lock_match) and gives the request its row and Mamba slots
    (alloc_req_slots)."""
    lock_match(cache, req)
    alloc_req_slots(cache, req, knobs)


def lock_match(cache: UnifiedRadixCache, req: Req) -> None:
    state = cache.kv_of(req)
    state.receipt = cache.inc_lock_ref(req.last_node, rid=req.rid)
    state.swa_released = False


def unlock_match(cache: UnifiedRadixCache, req: Req) -> None:
    """Not admitted after all: the lock goes, and the copy-on-write slot (the scheduler
    reverts it)."""
    state = cache.req_states.pop(req)
    cache.dec_lock_ref(req.last_node, state.receipt, rid=req.rid)
    if state.mamba_pool_idx is not None:
        cache.mamba_pool.free([state.mamba_pool_idx])


def revert_match(cache: UnifiedRadixCache, req: Req) -> None:
    """Matched but not admitted, nothing locked: the copy-on-write slot goes back (SGLang's
    scheduler frees it when add_one_req turns the request away)."""
    state = cache.req_states.pop(req, None)
    if state is not None and state.mamba_pool_idx is not None:
        cache.mamba_pool.free([state.mamba_pool_idx])


def mamba_tracking_slots(cache: UnifiedRadixCache, knobs: SchedulerKnobs) -> int:
    """Ping-pong track slots a request takes (get_mamba_tracking_slots): 2 with the extra
    buffer and the overlap scheduler, 1 without the overlap scheduler, 0 with no_buffer."""
    if not cache.enable_mamba_extra_buffer:
        return 0
    return 2 if knobs.enable_overlap_schedule else 1


def ensure_mamba_capacity(cache: UnifiedRadixCache, reqs: list[Req],
                          knobs: SchedulerKnobs) -> None:
    """Evicts cached states so that the slots `reqs` still lack fit (allocation.py's
    ensure_mamba_capacity: one eviction for the batch)."""
    if not cache.is_mamba_enabled:
        return
    tracking = mamba_tracking_slots(cache, knobs)
    need = 0
    for req in reqs:
        state = cache.kv_of(req)
        need += (state.mamba_pool_idx is None) + (
            tracking if state.mamba_ping_pong_track_buffer is None else 0)
    short = need - cache.mamba_pool.available_size()
    if short > 0:
        cache.evict_for_alloc(mamba_num=short)


def alloc_req_slots(cache: UnifiedRadixCache, req: Req, knobs: SchedulerKnobs,
                    ensured: bool = False) -> None:
    """The row starts with the match; a Mamba tree adds the request's slots
    (ensure_mamba_capacity unless `ensured` for a batch, then HybridReqToTokenPool.alloc:
    the working slot, then the ping-pong track slots)."""
    state = cache.kv_of(req)
    req.slot_ids = list(req.prefix_indices)
    if not cache.is_mamba_enabled:
        return
    if not ensured:
        ensure_mamba_capacity(cache, [req], knobs)
    size = 2 if knobs.enable_overlap_schedule else 1
    tracking = mamba_tracking_slots(cache, knobs)
    if state.mamba_pool_idx is None:
        state.mamba_pool_idx = _alloc_or_fail(cache, 1)[0]
    if cache.enable_mamba_extra_buffer and state.mamba_ping_pong_track_buffer is None:
        slots = _alloc_or_fail(cache, tracking)
        state.mamba_ping_pong_track_buffer = slots + [None] * (size - tracking)
        state.mamba_prev_track_seqlen = None
        state.mamba_next_track_idx = 0
        state.mamba_last_track_idx = 1 if size == 2 else 0


def _alloc_or_fail(cache: UnifiedRadixCache, n: int) -> list[int]:
    got = cache.mamba_pool.alloc(n)
    if got is None:
        raise RuntimeError("not enough Mamba state slots: raise max_mamba_cache_size or "
                           "mamba_full_memory_ratio")
    return got


def evict_to_free_tokens(cache: UnifiedRadixCache, num_tokens: int) -> None:
    """Evicts so that `num_tokens` fit in every KV pool (the allocator's
    evict_to_free_tokens: the SWA allocator asks each pool for its own shortfall)."""
    a = cache.allocator
    if cache.is_swa_enabled:
        full, swa = a.full_available_size(), a.swa_available_size()
        if full < num_tokens or swa < num_tokens:
            cache.evict_for_alloc(max(0, num_tokens - full), max(0, num_tokens - swa))
    elif a.available_size() < num_tokens:
        cache.evict_for_alloc(num_tokens - a.available_size())


def check_decode_capacity(cache: UnifiedRadixCache, reqs: list[Req]) -> bool:
    """Whether the next decode step fits after evicting (check_decode_mem): a page for
    each request whose row ends on a page boundary."""
    ps = cache.page_size
    need = sum(1 for r in reqs if len(r.slot_ids) % ps == 0) * ps
    evict_to_free_tokens(cache, need)
    return cache.allocator.available_size() >= need


def alloc_kv(cache: UnifiedRadixCache, req: Req, num_tokens: int, reserve: int) -> None:
    """num_tokens more KV slots for req's row, after evicting so that `reserve` tokens fit
    (evict_from_tree_cache); reserve 0 evicts nothing."""
    if reserve:
        evict_to_free_tokens(cache, reserve)
    last = req.slot_ids[-1] if req.slot_ids else None
    got = cache.allocator.alloc_extend(last, num_tokens)
    if got is None:
        raise RuntimeError(f"request {req.rid!r}: out of KV slots for {num_tokens} tokens")
    req.slot_ids += got


def track_mamba_extend(cache: UnifiedRadixCache, req: Req, start: int, end: int) -> None:
    """The extra buffer keeps the state at the last checkpoint-grid point the extend
    reaches, or at the match's branching seqlen when it falls inside (SGLang's
    _mamba_radix_cache_v2_req_prepare_for_extend, without DCP)."""
    if not cache.enable_mamba_extra_buffer:
        return
    comp, state = cache.components[MAMBA], cache.kv_of(req)
    grid, chunk, n = comp.checkpoint_grid, comp.cache_chunk_size, end - start
    if n < grid:
        return
    aligned = start + n // grid * grid
    track = end
    if start + n // cache.mamba_chunk_size * cache.mamba_chunk_size != aligned:
        track = aligned + 1  # the state comes from the chunk's intermediate h
    state.mamba_last_track_idx = state.mamba_next_track_idx
    if len(state.mamba_ping_pong_track_buffer) == 2:
        state.mamba_next_track_idx = 1 - state.mamba_next_track_idx
    b = state.mamba_branching_seqlen
    if b is not None and start < b < track and (b - start) % chunk == 0:
        aligned = b
    state.mamba_last_track_seqlen = aligned
    _tracked(cache, req, state, aligned)


def _tracked(cache, req, state, seqlen: int) -> None:
    if cache._sink is not None:
        slot = state.mamba_ping_pong_track_buffer[state.mamba_last_track_idx]
        cache._emit(ev.MambaStateTracked(req.rid, seqlen, slot))


def extend(cache: UnifiedRadixCache, req: Req, end: int) -> None:
    """KV for [len(row), end) and the prefill's Mamba tracking; an unfinished prompt (end
    short of it) is a chunk: checkpointed at end (checkpoint_kv_cache)."""
    start = len(req.slot_ids)
    n = end - start
    ps = cache.page_size
    alloc_kv(cache, req, n, n + (ps if ps > 1 else 0))
    begin_extend(cache, req, start, end)
    if end < len(req.all_ids):
        cache.checkpoint(req, up_to=end)


def begin_extend(cache: UnifiedRadixCache, req: Req, start: int, end: int) -> None:
    """The row holds KV slots through `end`: the extend's Mamba state is tracked, the
    request's fill ends at `end` and its decode count restarts (prepare_for_extend)."""
    track_mamba_extend(cache, req, start, end)
    req.fill_ids = head(req.all_ids, end)
    cache.kv_of(req).decode_batch_idx = 0


def prepare_decode(cache: UnifiedRadixCache, reqs: list[Req], knobs: SchedulerKnobs) -> None:
    """Before a decode step's forward (each request computed through len(row), one sampled
    token pending): SWA slots past the window go (in steps of swa_eviction_interval, not on
    the first decode: maybe_evict_swa), then one KV slot each (evicting the shortfall)."""
    if cache.is_swa_enabled:
        for req in reqs:
            _maybe_evict_swa(cache, req, knobs)
    evict_to_free_tokens(cache, len(reqs) * cache.page_size)
    for req in reqs:
        alloc_kv(cache, req, 1, 0)


def commit_decode(cache: UnifiedRadixCache, reqs: list[Req], tokens, knobs: SchedulerKnobs) \
        -> None:
    """After the forward: each request's sampled token, its decode count, and a Mamba state
    kept every lcm(checkpoint grid, mamba_track_interval) tokens (the result processor)."""
    extra = cache.enable_mamba_extra_buffer
    for req, token in zip(reqs, tokens, strict=True):
        req.output_ids.append(token)
        state = cache.kv_of(req)
        state.decode_batch_idx += 1
        if extra:
            _track_mamba_decode(cache, req, state, knobs)


def decode_step(cache: UnifiedRadixCache, reqs: list[Req], knobs: SchedulerKnobs,
                next_token) -> None:
    """One decode step for `reqs` with no model: prepare_decode, then commit_decode of
    `next_token(req)` for each."""
    prepare_decode(cache, reqs, knobs)
    commit_decode(cache, reqs, [next_token(req) for req in reqs], knobs)


def _maybe_evict_swa(cache, req: Req, knobs: SchedulerKnobs) -> None:
    state, w = cache.kv_of(req), cache.sliding_window_size
    seqlen = len(req.slot_ids) + 1  # the token this step computes
    due = seqlen - 1 - w >= state.swa_evicted_seqlen + knobs.swa_eviction_interval
    if state.decode_batch_idx >= 1 and due:
        free_swa_out_of_window_slots(cache, req, state, seqlen - 1)
    if knobs.release_prefill_swa and state.decode_batch_idx >= w and not state.swa_released \
            and state.receipt is not None and state.receipt.swa_uuid is not None:
        cache.dec_swa_lock_only(req.last_node, state.receipt, rid=req.rid)
        state.swa_released = True


def _track_mamba_decode(cache, req: Req, state, knobs: SchedulerKnobs) -> None:
    grid = math.lcm(cache.components[MAMBA].checkpoint_grid, knobs.mamba_track_interval)
    committed = len(req.slot_ids)
    if committed % grid:
        return
    track_idx = state.mamba_next_track_idx
    state.mamba_prev_track_seqlen = state.mamba_last_track_seqlen
    state.mamba_last_track_seqlen = committed
    state.mamba_last_track_idx = track_idx
    if len(state.mamba_ping_pong_track_buffer) == 2:
        state.mamba_next_track_idx = 1 - track_idx
    _tracked(cache, req, state, committed)


def finish(cache: UnifiedRadixCache, req: Req) -> None:
    cache.release_kv_cache(req, checkpoint=True)


def retract(cache: UnifiedRadixCache, req: Req) -> None:
    """Retraction or abort: nothing is inserted; the request starts over later."""
    cache.release_kv_cache(req, checkpoint=False)
    req.slot_ids, req.prefix_indices, req.last_node = [], [], None
    req.cache_protected_len = req.cache_inserted_len = 0


def serve(cache: UnifiedRadixCache, req: Req, knobs: SchedulerKnobs,
          chunked_prefill_size: int | None = None, next_token=lambda req: 0) -> int:
    """One request alone, start to end: match, admit, prefill (in chunks), decode to
    max_new_tokens (the first token comes with the prefill; each step after the scheduler's
    capacity check), finish. Returns its hit.

    >>> from radix.tree.hybrid_pools import MambaSlotPool
    >>> from radix.request import SlotAllocator
    >>> c = UnifiedRadixCache(("full", "mamba"), allocator=SlotAllocator(4096),
    ...                       mamba_pool=MambaSlotPool(16))
    >>> k = SchedulerKnobs()
    >>> [serve(c, Req(f"r{i}", list(range(1600)) + [i] * 600, max_new_tokens=1), k)
    ...  for i in range(3)]
    [0, 0, 1600]
    """
    match_kv_cache(cache, req)
    hit = req.cache_protected_len
    admit(cache, req, knobs)
    end, total = len(req.slot_ids), len(req.all_ids)
    while end < total:
        step = total - end if not chunked_prefill_size else min(chunked_prefill_size, total - end)
        end += step
        extend(cache, req, end)
    if not prefill_done(cache, req, next_token(req)):
        while not req.finished:
            if not check_decode_capacity(cache, [req]):  # (the scheduler's check first)
                raise MemoryError(f"request {req.rid!r}: no KV slot for its next decode step")
            decode_step(cache, [req], knobs, next_token)
        finish(cache, req)
    return hit


def prefill_done(cache: UnifiedRadixCache, req: Req, token: int) -> bool:
    """The prompt's last extend ran and sampled `token`: a finished request is released
    (returns True), a running one checkpointed (it donates the state it tracked, e.g. at
    the branch point)."""
    req.output_ids.append(token)
    if req.finished:
        finish(cache, req)
        return True
    cache.checkpoint(req, up_to=len(req.slot_ids))
    return False
