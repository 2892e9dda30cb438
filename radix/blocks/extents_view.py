"""Looking into an ExtentBlockManager: unreachable blocks, the free queue, evictions, invariants.

Follows radix/blocks/snapshot.py's definitions: a cached block is unreachable when a block
before it in its chain is no longer cached (no lookup can reach it; it only waits to be reused).
`free_queue` lists the queue head to tail one block at a time, each block named by what it
caches, so tests can hold it against BlockPool's queue. Leaves out: block ids, drawing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from radix.blocks.extents import EvictionMark, ExtentBlockManager, Segment
from radix.blocks.trie import TrieNode


def num_unreachable_blocks(m: ExtentBlockManager) -> int:
    """Cached blocks that no lookup can reach (BlockCacheManager.num_unreachable_blocks).

    >>> num_unreachable_blocks(ExtentBlockManager(4))
    0
    """
    reachable = 0
    stack: list[tuple[TrieNode, bool]] = [(root, True) for root in m.trie.roots.values()]
    while stack:
        node, ok = stack.pop()
        gap = _first_gap(node) if ok else node.d0
        reachable += sum(max(0, min(s.hi, gap) - s.lo) for s in node.carriers)
        for (pos, _), child in node.children.items():
            stack.append((child, ok and pos <= gap))
    return m.num_cached_blocks - reachable


def _first_gap(node: TrieNode) -> int:
    """The first position of `node` (from d0) that no carrier covers."""
    pos = node.d0
    for s in sorted(node.carriers, key=lambda s: s.lo):
        if s.lo > pos:
            break
        pos = max(pos, s.hi)
    return pos


def free_queue(m: ExtentBlockManager) -> list[tuple[Hashable, tuple[int, ...]] | None]:
    """The free queue head to tail, a block each: None for a block without a hash, else
    (namespace, the tokens of its chain up to and including it). For tests: cost O(blocks).

    >>> free_queue(ExtentBlockManager(3))
    [None, None]
    """
    names = {id(root): ns for ns, root in m.trie.roots.items()}
    out: list[tuple[Hashable, tuple[int, ...]] | None] = [None] * m.unhashed_free
    seg = m._head.next
    bs = m.block_size
    while seg is not m._tail:
        root = seg.node
        while root.parent is not None:
            root = root.parent
        ns = names[id(root)]
        for pos in range(seg.hi - 1, seg.lo - 1, -1):
            out.append((ns, tuple(seg.node.content[:(pos + 1) * bs])))
        seg = seg.next
    return out


def last_eviction(m: ExtentBlockManager, tokens: Sequence[int], ns: Hashable, block: int
                  ) -> EvictionMark | None:
    """The latest pop that evicted block `block` of `tokens`' chain (needs record_evictions)."""
    pieces, _, reached = m.trie.walk(tokens, ns, block + 1)  # (a Walk)
    if reached <= block:
        return None
    node = pieces[-1][0]
    for lo, hi, mark in reversed(node.marks):
        if lo <= block < hi:
            return mark
    return None


def check_invariants(m: ExtentBlockManager) -> None:
    """Raises AssertionError unless: the queue is well linked and holds exactly the ref 0
    segments; free + in use == num_blocks - 1; cached blocks == what carriers hold; each
    segment's ref_cnt == the requests holding it."""
    queued, prev, seg = 0, m._head, m._head.next
    while seg is not m._tail:
        assert seg.prev is prev and seg.ref == 0 and seg.lo < seg.hi, "broken queue"
        queued += seg.hi - seg.lo
        prev, seg = seg, seg.next
    assert m._tail.prev is prev and queued == m.num_queued, "queue count"
    holders: Counter[int] = Counter()
    segs: dict[int, Segment] = {}
    unhashed_used = 0
    for state in m.requests.values():
        unhashed_used += state.num_blocks - state.num_cached
        for first, hi in state.entries:
            s = first
            while s is not None and s.lo < hi:
                holders[id(s)] += 1
                segs[id(s)] = s
                s = s.piece
    carried = [s for node in m.trie.nodes() for s in node.carriers]
    assert sum(s.hi - s.lo for s in carried) == m.num_cached_blocks, "cached count"
    in_use = 0
    for s in carried:
        assert s.ref == holders.get(id(s), 0), f"segment [{s.lo}, {s.hi}): ref {s.ref}"
        assert (s.ref == 0) == (s.prev is not None), "a free segment is not queued"
        in_use += (s.hi - s.lo) if s.ref else 0
    assert len(segs) == sum(1 for s in carried if s.ref), "a held segment is not carried"
    assert m.num_free_blocks + in_use + unhashed_used == m.num_blocks - 1, "free + used"
