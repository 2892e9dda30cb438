"""The eviction strategies of SGLang 0.5.23 (mem_cache/evict_policy.py) and the heaps that
order evictable leaves by them: a strategy is a sort key over a leaf, the smallest evicted first.

Deliberate difference: SGLang breaks exact ties by heap order over a set (arbitrary); we break
them by node id (the older node first), so that every run replays exactly.
Leaves out: SGLang's experimental strategies beyond these eight.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# SGLang heapifies every evictable leaf on each `evict` call: the host tier does the same
# (`LeafOrder`); RadixCache's `EvictionHeap` keeps its heap across calls and drops stale entries
# lazily, which pops the same order in O(k log n) for k leaves. T-LRU (`make_tlru`) exists in
# 0.5.23's UnifiedRadixCache only (the classic class lacks its bookkeeping); ours keeps that
# bookkeeping in either flavor.

SortKey = Any  # a float or a tuple of numbers; smaller is evicted first
HEAP_SLACK = 64  # stale heap entries tolerated beyond 2 per evictable leaf before a rebuild


def lru(node) -> SortKey:
    """Least recently used first."""
    return node.last_access_time


def mru(node) -> SortKey:
    """Most recently used first."""
    return -node.last_access_time


def fifo(node) -> SortKey:
    """Oldest node first."""
    return node.creation_time


def filo(node) -> SortKey:
    """Newest node first."""
    return -node.creation_time


def lfu(node) -> SortKey:
    """Fewest hits first, then least recently used."""
    return (node.hit_count, node.last_access_time)


def priority(node) -> SortKey:
    """Lowest request priority first, then least recently used."""
    return (node.priority, node.last_access_time)


def make_slru(protected_threshold: int = 2) -> Callable[[Any], SortKey]:
    """Segmented LRU: probationary (hit_count < threshold) before protected, LRU within each.

    >>> class N: hit_count, last_access_time = 2, 5.0
    >>> make_slru(2)(N)
    (1, 5.0)
    """
    if not isinstance(protected_threshold, int) or protected_threshold < 0:
        raise ValueError(f"protected_threshold must be an int >= 0, got {protected_threshold!r}")

    def slru(node) -> SortKey:
        return (1 if node.hit_count >= protected_threshold else 0, node.last_access_time)

    return slru


def make_tlru(threshold: int | float = 0,
              next_prompt_estimate: int | float = 0) -> Callable[[Any], SortKey]:
    """Tail-optimized LRU (SGLang's TLRUStrategy, after Zhang et al., arXiv:2510.15152).

    A conversation whose branch reached L tokens (`tlru_history_len`, the high-water depth,
    which does not shrink when its tail is evicted) and whose next prompt adds about Q tokens
    must keep L + Q - threshold tokens cached for its next prefill to stay within the TTFT
    budget. A leaf whose parent path alone already holds that many is "TEL-safe": evicting it
    costs no tail latency, so it sorts before every other leaf (key -1); then LRU. Both
    figures are tokens (the paper counts blocks: multiply by the page size).

    A branch of 100 tokens as 60 + 40, threshold 50, Q 10: budget 100 + 10 - 50 = 60; the
    40-token leaf sits on 60 cached tokens, 60 >= 60, so it is TEL-safe.

    >>> class N: tlru_history_len, tlru_cached_prefix_len, key, last_access_time = (
    ...     100, 100, [0] * 40, 7.0)
    >>> make_tlru(50, 10)(N)
    (-1, 7.0)
    """
    for name, x in (("threshold", threshold), ("next_prompt_estimate", next_prompt_estimate)):
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise TypeError(f"T-LRU {name} must be a number of tokens, got {x!r}")

    def tlru(node) -> SortKey:
        budget = max(node.tlru_history_len + next_prompt_estimate - threshold, 0)
        tel_safe = node.tlru_cached_prefix_len - len(node.key) >= budget
        return (-1 if tel_safe else 0, node.last_access_time)

    return tlru


def tlru_new_node(node, parent) -> None:
    """T-LRU bookkeeping for a new leaf under `parent`: its depth, and the high-water depth of
    every ancestor it deepens (SGLang's _set_tlru_lens_and_raise_history).

    >>> class N: tlru_cached_prefix_len = tlru_history_len = 0; key = (); parent = None
    >>> root, leaf = N(), N(); leaf.key, leaf.parent = [1, 2, 3], root
    >>> tlru_new_node(leaf, root); leaf.tlru_cached_prefix_len, root.tlru_history_len
    (3, 3)
    """
    depth = node.tlru_cached_prefix_len = parent.tlru_cached_prefix_len + len(node.key)
    node.tlru_history_len = max(node.tlru_history_len, depth)
    x = parent
    while x is not None and x.tlru_history_len < depth:
        x.tlru_history_len = depth
        x = x.parent


def tlru_split(new, child, split_len: int) -> None:
    """A split adds no depth: the new upper node sits split_len below its parent and inherits
    the branch's high-water mark; the child keeps its own."""
    new.tlru_cached_prefix_len = new.parent.tlru_cached_prefix_len + split_len
    new.tlru_history_len = child.tlru_history_len


POLICIES = ("lru", "mru", "fifo", "filo", "lfu", "priority", "slru", "tlru")

def get_strategy(
    name: str, policy_config: Mapping[str, Any] | None = None
) -> Callable[[Any], SortKey]:
    """The sort-key function for a policy name.

    >>> get_strategy("slru", {"protected_threshold": 3}).__name__
    'slru'
    """
    name = name.lower()
    config = dict(policy_config or {})
    if name == "slru":
        threshold = config.pop("protected_threshold", 2)
        strategy = make_slru(threshold)
    elif name == "tlru":
        strategy = make_tlru(config.pop("threshold", 0), config.pop("next_prompt_estimate", 0))
    elif name in POLICIES:
        strategy = globals()[name]
    else:
        raise ValueError(f"unknown eviction policy {name!r}; choose one of {', '.join(POLICIES)}")
    if config:
        raise ValueError(f"unknown policy_config keys for {name!r}: {sorted(config)}")
    return strategy


class EvictionHeap:
    """The evictable leaves (`leaves`, SGLang's `evictable_leaves` set) in eviction order.

    Heap entries are (sort key, node id, version, node), invalidated lazily: a node's
    `heap_version` bumps whenever it gets a fresh entry, so its older entries are skipped on pop,
    as is any entry whose node left the set. While a node stays in the set its latest entry stays
    in the heap, so `touch` pushes only when the node's sort key moved.

    >>> class N:
    ...     def __init__(self, i, t): self.id, self.last_access_time, self.heap_version = i, t, 0
    >>> a, b = N(1, 5.0), N(2, 3.0); h = EvictionHeap(lru)
    >>> h.add(a); h.add(b); h.pop().id  # b was used longer ago
    2
    """

    def __init__(self, sort_key: Callable[[Any], SortKey]) -> None:
        self.sort_key = sort_key
        self.leaves: set = set()  # the evictable leaves
        self.entries: list = []  # a heapq list of (sort key, node id, version, node)

    def add(self, node: Any) -> None:
        self.leaves.add(node)
        self._push(node)

    def discard(self, node: Any) -> None:
        self.leaves.discard(node)  # its entries go stale

    def touch(self, node: Any) -> None:
        """A walk wrote `node`'s access time: if it is in the set and its key moved, re-push."""
        if node in self.leaves and self.sort_key(node) != node.heap_key:
            self._push(node)

    def pop(self) -> Any | None:
        """The first leaf in eviction order, taken out of the set; None when the set is empty."""
        entries, leaves = self.entries, self.leaves
        while entries:
            _, _, version, node = heapq.heappop(entries)
            if version == node.heap_version and node in leaves:
                leaves.discard(node)
                return node
        return None

    def _push(self, node: Any) -> None:
        node.heap_version += 1
        node.heap_key = key = self.sort_key(node)
        heapq.heappush(self.entries, (key, node.id, node.heap_version, node))
        if len(self.entries) > 2 * len(self.leaves) + HEAP_SLACK:
            self._rebuild()

    def _rebuild(self) -> None:
        """One fresh entry per leaf, O(n); in place, since a running evict holds the list."""
        entries = []
        for node in self.leaves:
            node.heap_version += 1
            node.heap_key = key = self.sort_key(node)
            entries.append((key, node.id, node.heap_version, node))
        heapq.heapify(entries)
        self.entries[:] = entries

    def check(self) -> str | None:
        """What is wrong with the heap, or None (for check_invariants)."""
        live = {e[3] for e in self.entries if e[2] == e[3].heap_version}
        for node in self.leaves:
            if node not in live:
                return f"evictable leaf {node.id} has no live heap entry"
        for key, _, version, node in self.entries:
            if version == node.heap_version and node in self.leaves and key != self.sort_key(node):
                return f"heap entry of leaf {node.id} has a stale sort key"
        return None


class LeafOrder:
    """Candidate leaves in eviction order for one call, as SGLang's evict builds them: every
    candidate heapified with its sort key at the start (ties to the older node id), a parent
    that becomes a candidate pushed during the call. Popped nodes are the caller's to check
    (a node may have stopped being a candidate since it was pushed).

    >>> class N:
    ...     def __init__(self, i, t): self.id, self.last_access_time = i, t
    >>> order = LeafOrder([N(1, 5.0), N(2, 3.0)], lru); order.push(N(3, 4.0))
    >>> [order.pop().id for _ in range(3)], order.pop()
    ([2, 3, 1], None)
    """

    __slots__ = ("sort_key", "entries")

    def __init__(self, leaves: Iterable[Any], sort_key: Callable[[Any], SortKey]) -> None:
        self.sort_key = sort_key
        self.entries = [(sort_key(x), x.id, x) for x in leaves]  # (sort key, node id, node)
        heapq.heapify(self.entries)

    def push(self, node: Any) -> None:
        heapq.heappush(self.entries, (self.sort_key(node), node.id, node))

    def pop(self) -> Any | None:
        """The first node in eviction order; None when none is left."""
        return heapq.heappop(self.entries)[2] if self.entries else None

    def __bool__(self) -> bool:
        return bool(self.entries)
