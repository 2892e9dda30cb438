"""The seven eviction strategies of SGLang's RadixCache (mem_cache/evict_policy.py).

A strategy is a sort key over a leaf: the smallest key is evicted first. SGLang breaks exact ties
by heap order over a set (arbitrary); we break them by node id (the older node first) so that
every run replays exactly.
Leaves out: SGLang's experimental strategies beyond these seven.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SortKey = Any  # a float or a tuple of numbers; smaller is evicted first


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


POLICIES = ("lru", "mru", "fifo", "filo", "lfu", "priority", "slru")

# Which node fields each policy reads: a change to any other field never reorders the heap.
POLICY_FIELDS = {
    "lru": ("last_access_time",),
    "mru": ("last_access_time",),
    "fifo": ("creation_time",),
    "filo": ("creation_time",),
    "lfu": ("hit_count", "last_access_time"),
    "priority": ("priority", "last_access_time"),
    "slru": ("hit_count", "last_access_time"),
}


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
    elif name in POLICIES:
        strategy = globals()[name]
    else:
        raise ValueError(f"unknown eviction policy {name!r}; choose one of {', '.join(POLICIES)}")
    if config:
        raise ValueError(f"unknown policy_config keys for {name!r}: {sorted(config)}")
    return strategy
