"""A request's KV into and out of the tree: SGLang 0.5.23's checkpoint and release_kv_cache.

Follows sglang/srt/mem_cache/radix_cache.py (`checkpoint`, `_insert_cache`) and common.py
(`release_kv_cache`). `req.slot_ids` plays the request's req_to_token row. A request's row:

    0 ......... cache_protected_len ......... floor(up_to) ..... up_to ..... len(row)
    | owned by the tree (locked) | the request's own slots | partial page | over-allocated |

Leaves out: SWA/mamba components, HiCache, streaming sessions, strip_thinking_cache.
"""

from __future__ import annotations

from typing import Any

from radix.request import Req
from radix.tree.key import RadixKey

INT64_MAX = 2**63 - 1


def checkpoint(cache: Any, req: Req, up_to: int) -> None:
    """Inserts req's tokens [0, up_to) page-floored, then the prompt alone with priority + 1
    (so the leaf splits at the prompt boundary), frees the request's slots the tree already
    had, points the row at the tree's slots and moves the lock (unlock old, lock new).

    A 5-token prompt plus 3 output tokens, page 1, nothing cached: the insert makes one node of
    8, the prompt insert splits it 5 + 3; the prompt node has priority 1, the output node 0.
    """
    if cache.disable:
        return
    row = req.slot_ids
    if not 0 <= up_to <= len(row):
        raise ValueError(f"request {req.rid!r}: up_to {up_to} is outside 0..{len(row)} "
                         "(the slots it holds)")
    ids = req.all_ids[:up_to]
    n = cache._aligned(ids)
    key = RadixKey(ids[:n], req.extra_key, req.cache_salt)
    values = row[:n]
    priority = req.priority or 0
    result = cache._insert(key, values, priority, req.cache_inserted_len)
    req.cache_inserted_len = max(req.cache_inserted_len, n)
    # the prompt-boundary split: nothing new is cached, the prompt's nodes rise to priority + 1
    prompt_len = cache._aligned(ids[: len(req.origin_input_ids)])
    if 0 < prompt_len < n:
        if cache._sink is None:  # the same effects, walking up from the insert's node
            cache._raise_prompt(result.last_node, n, prompt_len, min(priority + 1, INT64_MAX))
        else:
            cache._insert(key[:prompt_len], values[:prompt_len], min(priority + 1, INT64_MAX),
                          prompt_len)
    protected = req.cache_protected_len
    cache._free(row[protected : result.prefix_len])  # duplicates of what the tree had
    # SGLang matches the key again for the tree's slots and node; the key ends at the first
    # insert's node (a prompt-boundary split only adds a parent above it), so without a
    # listener the match walks up from there (the same access times and leaf set) and joins
    # only the slots the row takes
    if cache._sink is None and n:
        new_last = result.last_node
        row[protected:n] = cache._rematch_tail(new_last, n, n - protected)
    else:
        match = cache._match(key)
        new_indices, new_last = match.slot_ids, match.last_node
        assert len(new_indices) == n, (len(new_indices), n)
        row[protected:n] = new_indices[protected:]
    req.cache_protected_len = n
    if req.last_node is not None:
        cache._lock(req.last_node, -1)
    cache._lock(new_last, +1)
    req.last_node = new_last
    req.prefix_indices = row[:up_to]


def release(cache: Any, req: Req, insert: bool, kv_len: int | None) -> None:
    """release_kv_cache: checkpoint up to the owned length (when inserting), free the row's
    [cache_protected_len, owned) (the unaligned tail, or everything the request computed when
    not inserting), unlock, then free the over-allocated rest from the next page boundary.

    Page 4, a row of 10 committed slots, nothing cached: the insert takes 8, the tail 8..10 is
    freed, then the lock (moved to the new leaf by the checkpoint) is dropped.
    """
    row = req.slot_ids
    owned = len(row) if kv_len is None else kv_len
    if not isinstance(owned, int) or not 0 <= owned <= len(row):
        raise ValueError(f"request {req.rid!r}: kv_len_to_handle {kv_len!r} is outside "
                         f"0..{len(row)} (the slots it holds)")
    if cache.disable:
        cache._free(row)
        req.last_node = None
        return
    if insert:
        checkpoint(cache, req, owned)
    cache._free(row[req.cache_protected_len : owned])
    if req.last_node is not None:
        cache._lock(req.last_node, -1)
    req.last_node = None
    # subtle: a paged allocator frees the whole page holding `owned - 1` with the tail above,
    # so the over-allocated range starts at the next page boundary there (SGLang's ceil_align)
    ps = getattr(cache.allocator, "page_size", 1)
    cache._free(row[-(-owned // ps) * ps :])
