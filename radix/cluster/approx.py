"""The router's approximate prefix tree: which replica was sent which prompt, not what it caches.

One trie shared by all replicas ("tenants"), as sgl-router's `policies/tree.rs` and Ray Serve's
`PrefixTree` keep it: each node is a block of a prompt (a chained block key, see
`radix.cluster.base.block_keys`) and remembers, per tenant, when a prompt routed there last
passed through it. `match` gives each tenant's matched depth; `evict` trims a tenant past a size
by its least recently used leaves, as the upstream periodic eviction does.
Deliberate difference: upstream trees hold characters of the request text; this one holds blocks
of token ids (sizes are counted in tokens: blocks x block size). Leaves out: node splitting
(blocks are whole), concurrency.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple


class _Node:
    __slots__ = ("children", "key", "parent", "tenants")

    def __init__(self, key: int | None, parent: _Node | None) -> None:
        self.key, self.parent = key, parent
        self.children: dict[int, _Node] = {}
        self.tenants: dict[int, float] = {}  # tenant -> last access time


class Match(NamedTuple):
    depths: tuple[int, ...]  # per tenant: blocks of the prompt its routed prompts share
    best: int  # the largest depth
    tenants: tuple[int, ...]  # the tenants at that depth (ascending)


class ApproxTree:
    """Per-tenant prefix history in blocks.

    >>> t = ApproxTree(num_tenants=2)
    >>> t.insert((1, 2, 3), tenant=0, now=0.0); t.insert((1, 5), tenant=1, now=1.0)
    >>> t.match((1, 2, 9))
    Match(depths=(2, 1), best=2, tenants=(0,))
    >>> t.sizes
    [3, 2]
    """

    def __init__(self, num_tenants: int) -> None:
        self.root = _Node(None, None)
        self.sizes = [0] * num_tenants  # blocks each tenant holds

    def insert(self, keys: Sequence[int], tenant: int, now: float) -> None:
        node = self.root
        for key in keys:
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node(key, node)
            if tenant not in child.tenants:
                self.sizes[tenant] += 1
            child.tenants[tenant] = now
            node = child

    def match(self, keys: Sequence[int]) -> Match:
        depths = [0] * len(self.sizes)
        node = self.root
        for i, key in enumerate(keys):
            node = node.children.get(key)
            if node is None:
                break
            for tenant in node.tenants:
                depths[tenant] = i + 1
        best = max(depths, default=0)
        tenants = tuple(t for t, d in enumerate(depths) if d == best) if best else ()
        return Match(tuple(depths), best, tenants)

    def smallest(self) -> list[int]:
        """The tenants holding the fewest blocks (ascending ids)."""
        low = min(self.sizes)
        return [t for t, s in enumerate(self.sizes) if s == low]

    def evict(self, max_blocks: int, target_blocks: int | None = None) -> int:
        """Every tenant past `max_blocks` loses its least recently used leaves until it holds
        `target_blocks` (default: `max_blocks`). Returns the blocks removed."""
        target = max_blocks if target_blocks is None else target_blocks
        removed = 0
        for tenant, size in enumerate(self.sizes):
            if size > max_blocks:
                removed += self._evict_tenant(tenant, size - target)
        return removed

    def _evict_tenant(self, tenant: int, num: int) -> int:
        heap = [(n.tenants[tenant], id(n), n) for n in self._nodes() if tenant in n.tenants
                and not any(tenant in c.tenants for c in n.children.values())]
        heapq.heapify(heap)
        removed = 0
        while heap and removed < num:
            _, _, node = heapq.heappop(heap)
            del node.tenants[tenant]
            self.sizes[tenant] -= 1
            removed += 1
            parent = node.parent
            if not node.tenants and not node.children:
                del parent.children[node.key]
            if parent is not self.root and not any(
                    tenant in c.tenants for c in parent.children.values()):
                heapq.heappush(heap, (parent.tenants[tenant], id(parent), parent))
        return removed

    def _nodes(self) -> list[_Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
