"""A namespaced prefix trie over token sequences, in units of `unit` tokens, that never splits.

Each node is a run of unit positions [d0, d1) along the `content` of the sequence that created
it; a later sequence that leaves it at position p hangs its own node there, keyed by (p, the
unit's tokens), even in the middle of the edge. So a position, once known, keeps its node for
ever: the block cache's extent storage (ExtentPool, manager.py) files its carriers and eviction
marks on them, and the explainer (radix/runs/explain.py) records what was ever cached. Its own
file, below hashing.py (HashMemo) and the host tier's loss count, which use it too.
Walks cost O(nodes x runs). Follows nothing upstream. Leaves out: deletion (the trie only grows).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from radix.tokens import TokenRuns, common_prefix_from


class TrieNode:
    """Unit positions [d0, d1) of `content`'s chain; children keyed (position, unit tokens)."""

    __slots__ = ("content", "d0", "d1", "children", "depths", "parent", "owner", "carriers",
                 "marks")

    def __init__(self, content: Sequence[int], d0: int, d1: int, parent: TrieNode | None,
                 owner: Any = None) -> None:
        self.content = content  # a sequence whose first d1 units are this node's chain
        self.d0, self.d1 = d0, d1
        self.children: dict[tuple[int, Hashable], TrieNode] = {}
        self.depths: set[int] = set()  # positions some child hangs at (skips building keys)
        self.parent = parent
        self.owner = owner  # who may extend it in place (the sequence that created it)
        self.carriers: list[Any] = []  # ExtentPool: segments of blocks caching these positions
        self.marks: list[tuple[int, int, Any]] = []  # (lo, hi, what) annotations, in time order

    def __repr__(self) -> str:
        return f"TrieNode([{self.d0}, {self.d1}), {len(self.children)} children)"


class Walk(NamedTuple):
    pieces: list[tuple[TrieNode, int, int]]  # (node, lo, hi) covering [0, pos), in order
    node: TrieNode | None  # where the walk stopped (None: an unknown namespace)
    pos: int  # units known from the start


def _cut(walk: Walk, limit: int) -> Walk:
    """The part of a walk below `limit`."""
    pieces = [(n, a, min(b, limit)) for n, a, b in walk.pieces if a < limit]
    return Walk(pieces, pieces[-1][0] if pieces else walk.node, limit)


class PrefixTrie:
    """Sequences by namespace; `walk` finds how far a sequence is known, `insert` records it.

    >>> t = PrefixTrie(unit=2)
    >>> _ = t.insert([1, 2, 3, 4, 5, 6], None, 3)  # three units
    >>> [(n.d0, a, b) for n, a, b in t.insert([1, 2, 3, 4, 9, 9], None, 3).pieces]
    [(0, 0, 2), (2, 2, 3)]
    >>> t.known([1, 2, 3, 4, 9, 9, 7, 7], None, 4), t.known([1, 2], "tenant-b", 1)
    (3, 0)
    """

    def __init__(self, unit: int = 1) -> None:
        if unit < 1:
            raise ValueError(f"unit must be >= 1, got {unit}")
        self.unit = unit
        self.roots: dict[Hashable, TrieNode] = {}
        self.num_nodes = 0

    def key(self, tokens: Sequence[int], pos: int) -> Hashable:
        """The tokens of unit `pos`: an int, or the unit's runs (the same for a plain list and
        a TokenRuns of equal tokens)."""
        u = self.unit
        if u == 1:
            return tokens[pos]
        block = tokens[pos * u:(pos + 1) * u]
        return block if isinstance(block, TokenRuns) else TokenRuns.from_ids(block)

    def walk(self, tokens: Sequence[int], ns: Hashable, limit: int, resume: Walk | None = None
             ) -> Walk:
        """How far the first `limit` units of `tokens` are known: the pieces (node, lo, hi) in
        order covering [0, reached), the node the walk ended in, reached. `resume`: an earlier
        walk of a prefix of the same sequence (the trie only grows, so it is still true)."""
        if resume is None or resume.node is None:  # (no root then: there may be one now)
            pieces: list[tuple[TrieNode, int, int]] = []
            node, pos = self.roots.get(ns), 0
        else:
            if resume.pos >= limit:
                return _cut(resume, limit)
            pieces, node, pos = list(resume.pieces), resume.node, resume.pos
        u = self.unit
        while node is not None and pos < limit:
            end = min(node.d1, limit)
            if pos < end:
                same = common_prefix_from(tokens, node.content, pos * u, end * u) // u
                if same:
                    if pieces and pieces[-1][0] is node:  # resumed inside the same node
                        pieces[-1] = (node, pieces[-1][1], pos + same)
                    else:
                        pieces.append((node, pos, pos + same))
                    pos += same
                if pos == limit:
                    break
            if pos not in node.depths:
                break
            child = node.children.get((pos, self.key(tokens, pos)))
            if child is None:
                break
            node = child
        return Walk(pieces, node, pos)

    def known(self, tokens: Sequence[int], ns: Hashable, limit: int) -> int:
        """Units of `tokens` (at most `limit`) the trie already holds from the start."""
        return self.walk(tokens, ns, limit).pos

    def insert(self, tokens: Sequence[int], ns: Hashable, limit: int, owner: Any = None,
               resume: Walk | None = None) -> Walk:
        """Records the first `limit` units of `tokens`; returns the walk covering [0, limit).
        A node created by the same `owner` that ends where the walk stops grows in place."""
        walk = self.walk(tokens, ns, limit, resume)
        pieces, node, pos = walk
        if pos >= limit:
            return walk
        if node is None:
            node = self.roots[ns] = TrieNode((), 0, 0, None)
        if owner is not None and node.owner is owner and pos == node.d1:
            node.d1, node.content = limit, tokens  # the same sequence, grown: extend in place
            if pieces and pieces[-1][0] is node:
                pieces[-1] = (node, pieces[-1][1], limit)
            else:
                pieces.append((node, pos, limit))
            return Walk(pieces, node, limit)
        child = TrieNode(tokens, pos, limit, node, owner)
        node.children[(pos, self.key(tokens, pos))] = child
        node.depths.add(pos)
        self.num_nodes += 1
        pieces.append((child, pos, limit))
        return Walk(pieces, child, limit)

    def nodes(self):
        """Every node, parents before children."""
        stack = list(self.roots.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
