"""What each cache reuses of prompt B once prompt A is cached: the real caches, run on the pair.

The tree: SGLang's RadixCache holds A (its namespace); B matches `B[:-1]` (SGLang's
`_compute_max_prefix_len` keeps one token to compute: radix/sched/admission.py), page-aligned.
The blocks: vLLM's prefix cache (BlockCacheManager) computed A's blocks and freed them; B's
lookup takes whole cached blocks from the start, capped at (len(B) - 1) // block_size blocks
(vLLM v1 `KVCacheManager.get_computed_blocks`: `max_cache_hit_length = num_tokens - 1`).
Leaves out: eviction (both caches are big enough to hold the pair).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

Namespace = tuple[str | None, str | None]


class CacheOutcome(NamedTuple):
    """One cache's answer for prompt B."""

    cache: str  # "tree" or "blocks"
    unit: int  # page size (tree) or block size (blocks)
    hit: int  # prompt tokens of B reused
    prefilled: int  # len(B) - hit: tokens computed again
    shared: int  # tokens B shares with A from the start (same namespace), before any rule
    lost_to_unit: int  # shared tokens below a whole page/block (the floor; rounding)
    lost_to_last_token: int  # shared whole units given up so the last token is computed
    reason: str  # blocks: the lookup's stop reason ("miss", "cap", "partial"); tree: ""


def tree_outcome(a: Sequence[int], b: Sequence[int], ns_a: Namespace = (None, None),
                 ns_b: Namespace = (None, None), page_size: int = 1) -> CacheOutcome:
    """B against a tree that holds A.

    A and B share 5 tokens; B is 6 long: the tree matches min(5, 6 - 1) = 5.
    >>> tree_outcome([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 9]).hit
    5
    >>> tree_outcome(list(range(8)), list(range(8)), page_size=4)[2:]  # last token: a page
    (4, 4, 8, 0, 4, '')
    """
    tree = RadixCache(page_size=page_size)
    tree.insert(RadixKey(list(a), *ns_a))
    hit = tree.match_prefix(RadixKey(list(b[:len(b) - 1]), *ns_b)).prefix_len
    return _outcome("tree", page_size, len(b), hit, _shared(a, b, ns_a, ns_b), "")


def block_outcome(a: Sequence[int], b: Sequence[int], ns_a: Namespace = (None, None),
                  ns_b: Namespace = (None, None), block_size: int = 16) -> CacheOutcome:
    """B against vLLM's block cache after A ran (and was freed: its blocks stay cached).

    A 240-token shared prefix with blocks of 784: not one full block, so no hit (the floor).
    >>> s = list(range(240)); o = block_outcome(s + [1], s + [2], block_size=784)
    >>> o.hit, o.lost_to_unit, o.reason
    (0, 240, 'partial')
    """
    pool = BlockPool(-(-len(a) // block_size) + -(-len(b) // block_size) + 2, block_size)
    manager = BlockCacheManager(pool)
    first = Req("A", list(a), extra_key=ns_a[0], cache_salt=ns_a[1])
    manager.allocate_slots(first, len(a), manager.get_computed_blocks(first))
    manager.free(first)
    second = Req("B", list(b), extra_key=ns_b[0], cache_salt=ns_b[1])
    hit = manager.get_computed_blocks(second).num_computed_tokens
    reason = manager.lookups[-1].reason
    return _outcome("blocks", block_size, len(b), hit, _shared(a, b, ns_a, ns_b), reason)


def _shared(a: Sequence[int], b: Sequence[int], ns_a: Namespace, ns_b: Namespace) -> int:
    if ns_a != ns_b:
        return 0
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _outcome(cache: str, unit: int, n: int, hit: int, shared: int, reason: str
             ) -> CacheOutcome:
    """Splits the shared tokens: hit + lost to the last-token rule + lost below a unit."""
    whole = shared // unit * unit
    capped = min(shared, n - 1) // unit * unit
    if capped != hit:
        raise AssertionError(f"{cache}: the cache hit {hit}, the rules say {capped}")
    return CacheOutcome(cache, unit, hit, n - hit, shared, shared - whole, whole - capped,
                        reason)
