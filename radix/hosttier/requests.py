"""One request's life through a HostTierCache, as SGLang 0.5.23's scheduler drives it: match the
prompt minus its last token, load a host hit back at admission (init_load_back), lock, allocate
the rest (evicting the device shortfall), insert the whole sequence (duplicates freed from the
locked prefix on), unlock, free the unaligned tail. `serve_request` returns where the prompt's
tokens came from: the device, the host (loaded back) or nowhere (computed).

Leaves out: chunked prefill, batching (requests run one at a time), retraction, the admission
budget around the load (PrefillAdder.prepare_load_back and its host-locked reclaim).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radix.hosttier.cache import HostTierCache
from radix.hosttier.node import HostNode


class Served(NamedTuple):
    device_hit: int  # prompt tokens found on the device
    host_hit: int  # prompt tokens loaded back from the host
    miss: int  # prompt tokens computed
    admitted: bool  # False: the device could not hold the request (nothing cached)


def path_slots(node: HostNode) -> list[int]:
    """The device slots from the root to node (every node on it must be on the device)."""
    parts = []
    while node.parent is not None:
        parts.append(node.value)
        node = node.parent
    return [s for part in reversed(parts) for s in part]


def serve_request(cache: HostTierCache, prompt: Sequence[int],
                  output: Sequence[int] = (), priority: int = 0) -> Served:
    """Runs one request to completion and caches prompt + output.

    Write-through, device 8, host 17, load-back threshold 1: A = [1..6] is cached and backed
    up; B = [7..12] needs 6 slots, 2 are free, so A is demoted to host. A again: the match of
    A[:-1] splits A's host-only node 5 + 1 and finds 5 tokens on host; loading them needs 5
    slots, 2 are free, so B is demoted; the last token is computed, and its fresh slot
    restores the [6] node (DeviceRestored).
    >>> from radix.allocator import SlotAllocator
    >>> c = HostTierCache(SlotAllocator(8), 17, load_back_threshold=1)
    >>> a, b = list(range(1, 7)), list(range(7, 13))
    >>> serve_request(c, a), serve_request(c, b).miss, serve_request(c, a)
    (Served(device_hit=0, host_hit=0, miss=6, admitted=True), 6, \
Served(device_hit=0, host_hit=5, miss=1, admitted=True))
    """
    tokens = list(prompt) + list(output)
    n_prompt = len(prompt)
    match = cache.match_prefix(list(prompt[: max(n_prompt - 1, 0)]))
    loaded, node = cache.init_load_back(match)
    prefix = path_slots(node)
    cache.inc_lock_ref(node)
    alloc, ps = cache.allocator, cache.page_size
    need = len(tokens) - len(prefix)
    short = -(-need // ps) * ps - alloc.available_size()
    if short > 0:
        cache.evict(short)
    fresh = alloc.alloc(need)
    if fresh is None:
        cache.dec_lock_ref(node)
        return Served(0, 0, n_prompt, False)
    row = prefix + fresh
    aligned = len(tokens) - len(tokens) % ps
    cache.insert(tokens, row[:aligned], priority, prev_prefix_len=len(prefix))
    cache.dec_lock_ref(node)
    if aligned < len(row):
        alloc.free(row[aligned:])
    hit = min(match.device_prefix_len, n_prompt)
    host = min(loaded, n_prompt - hit)
    return Served(hit, host, n_prompt - hit - host, True)
