"""A request's KV into the unified tree and back (SGLang 0.5.23's UnifiedRadixCache.
checkpoint_into_tree and common.py's release_kv_cache / free_kv_row_segments), on our `Req`:
`slot_ids` plays its req_to_token row, and `UnifiedRadixCache.kv_of(req)` keeps what the
components read (the lock receipt, the SWA cursor, the Mamba slots).

    0 ..... cache_protected_len ..... swa_evicted_seqlen ........ up_to ....... len(row)
    | tree-owned (locked)    | ours, SWA freed (full only) | ours, both live | over-allocated |

Leaves out: sessions, EAGLE keys, the rotation-base decline, host backups (retraction keeps
nothing: the request is recomputed).
"""

from __future__ import annotations

from radix.request import Req
from radix.tokens import head
from radix.tree.components.base import FULL
from radix.tree.key import RadixKey
from radix.tree.lifecycle import INT64_MAX
from radix.tree.unified_types import InsertParams


def checkpoint_into_tree(cache, req: Req, up_to: int) -> None:
    """Inserts req's tokens [0, up_to) as far as every component can key them (Mamba: to its
    last tracked state; SWA without Mamba: to its branch point), frees the duplicates, points
    the row at the tree's slots and moves the lock to the new last node. A finished request
    (req.finished) hands its Mamba state over instead of forking it.

    A FULL-only tree also splits the leaf at the prompt boundary (priority + 1), as RadixCache.
    """
    state, row = cache.kv_of(req), req.slot_ids
    if not 0 <= up_to <= len(row):
        raise ValueError(f"request {req.rid!r}: up_to {up_to} is outside 0..{len(row)}")
    is_finished = req.finished
    prompt_ids = req.origin_input_ids  # the whole prompt shared when up_to covers it
    ids = head(prompt_ids if up_to <= len(prompt_ids) else req.all_ids, up_to)
    params = InsertParams(None, prev_prefix_len=req.cache_protected_len,
                          inserted_len=req.cache_inserted_len, priority=req.priority or 0)
    effective = len(ids)
    for comp in cache.aux:
        cl = comp.prepare_for_caching_req(req, state, params, len(ids), is_finished)
        if cl is not None:
            effective = min(effective, cl)
    if not is_finished:
        for comp in cache.aux:
            comp.free_out_of_window_slots(req, state, effective - 1, params)
    if effective <= 0:
        for comp in cache.aux:
            comp.cleanup_after_caching_req(req, state, is_finished, None, params)
        return
    n = effective - effective % cache.page_size
    params.key = RadixKey(head(ids, n), req.extra_key, req.cache_salt)
    params.value = row  # the insert reads its first n slots (the row is not changed in it)
    result = cache._insert(params)
    req.cache_inserted_len = max(req.cache_inserted_len, n)
    prompt = len(req.origin_input_ids)
    prompt -= prompt % cache.page_size
    if cache.tree_components == (FULL,) and 0 < prompt < n:
        cache._insert(InsertParams(params.key[:prompt], row[:prompt], prompt, prompt,
                                   min(params.priority + 1, INT64_MAX)))
    new_last = result.last_node
    protected = req.cache_protected_len
    if n > protected:  # the tree's slots for what the row does not own through the tree yet
        row[protected:n] = cache.path_values(new_last, n - protected)
    _move_lock(cache, req, state, new_last)
    req.cache_protected_len = n
    for comp in cache.aux:
        comp.cleanup_after_caching_req(req, state, is_finished, result, params)
    req.prefix_indices = row[:up_to]


def _move_lock(cache, req: Req, state, node) -> None:
    if req.last_node is not None and state.receipt is not None:
        cache.dec_lock_ref(req.last_node, state.receipt, skip_swa=state.swa_released)
    req.last_node = node
    state.receipt, state.swa_released = cache.inc_lock_ref(node), False


def release_kv_cache(cache, req: Req, checkpoint: bool = True, kv_len: int | None = None) -> None:
    """The request is done (finished, aborted or retracted): with `checkpoint` the tree keeps
    what it can key first; then the row past the tree-owned prefix is freed (full side only
    where its SWA is gone), the lock dropped, the over-allocated rest freed from the next
    page, and a request that inserted nothing gives its Mamba slots back.
    """
    row = req.slot_ids
    owned = len(row) if kv_len is None else kv_len
    if not isinstance(owned, int) or not 0 <= owned <= len(row):
        raise ValueError(f"request {req.rid!r}: kv_len {kv_len!r} is outside 0..{len(row)}")
    state = cache.kv_of(req)
    if checkpoint and cache.is_mamba_enabled and not req.finished:
        raise ValueError(f"request {req.rid!r}: releasing an unfinished request into a Mamba "
                         "tree would fork its state (SGLang asserts it)")
    if checkpoint and not cache.disable:
        checkpoint_into_tree(cache, req, owned)
    free_kv_row(cache, req, state, req.cache_protected_len, owned)
    if req.last_node is not None and state.receipt is not None:
        cache.dec_lock_ref(req.last_node, state.receipt, skip_swa=state.swa_released)
    req.last_node, state.receipt = None, None
    ps = cache.page_size
    start = -(-owned // ps) * ps
    if start < len(row):
        free_kv_row(cache, req, state, start, len(row))
    if not (checkpoint and not cache.disable):
        for comp in cache.aux:
            comp.cleanup_after_caching_req(req, state, True)
    cache.req_states.pop(req, None)


def free_kv_row(cache, req: Req, state, start: int, end: int) -> None:
    """Row positions [start, end) go back: those below the request's SWA cursor (and above
    the protected prefix) on the full side only, their SWA peers being free already."""
    if end <= start:
        return
    row = req.slot_ids
    lo = min(max(req.cache_protected_len, start), end)
    hi = min(max(state.swa_evicted_seqlen, req.cache_protected_len, start), end)
    if hi > lo:
        cache.free_full_only(row[lo:hi])
    if lo > start:
        cache.free_kv(row[start:lo])
    if end > hi:
        cache.free_kv(row[hi:end])
