"""Device and host locks of HostTierCache, and its invariants. A mixin over cache.py's tree.

Follows SGLang 0.5.23's FullComponent.acquire_component_lock / release_component_lock
(unified_cache/components/full.py): a device lock counts the host-only segment at the bottom
without moving tokens, then the device path to the root; a host lock pins one node (the
anchor), and a later split extends its segment upward to the new node.
Leaves out: lock receipts for SWA/Mamba components.
"""

from __future__ import annotations

from typing import Any

from radix import events as ev
from radix.hosttier.node import HostNode
from radix.tree.invariants import InvariantError, edge_problem


class TierLocks:
    """Mixin: needs the tree's fields and helpers (cache.py)."""

    def inc_lock_ref(self: Any, node: HostNode) -> int:
        """Device lock: the host-only segment at the bottom is counted without moving tokens,
        then the device path to the root; returns the tokens moved to protected."""
        x, root, moved = node, self.root_node, 0
        while x is not root and x.value is None:
            x.lock_ref += 1
            x = x.parent
        while x is not root:
            if x.lock_ref == 0:
                moved += len(x.value)
            x.lock_ref += 1
            self.device_leaves.discard(x)
            x = x.parent
        self.evictable_size_ -= moved
        self.protected_size_ += moved
        self._refresh(node)
        return moved

    def dec_lock_ref(self: Any, node: HostNode) -> None:
        x, root = node, self.root_node
        while x is not root:
            if x.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref: node {x.id} is not locked")
            if x.lock_ref == 1 and x.value is not None:
                self.evictable_size_ += len(x.value)
                self.protected_size_ -= len(x.value)
            x.lock_ref -= 1
            if x.lock_ref == 0:
                self._refresh(x)
            x = x.parent
        self._refresh(node)

    def inc_host_lock_ref(self: Any, node: HostNode) -> tuple[HostNode, int] | None:
        """Pins one node's host copy (the anchor; a later split extends the segment upward).
        Under write-through a node without a host copy is not pinned (None)."""
        if node.host_value is None and not self.is_write_back:
            return None
        if not node.host_anchor:
            node.host_anchor = self._next_anchor
            self._next_anchor += 1
        node.host_lock_ref += 1
        self._refresh(node)
        self._emit(ev.HostLockChanged(node.id, node.host_lock_ref, +1))
        return node, node.host_anchor

    def dec_host_lock_ref(self: Any, receipt: tuple[HostNode, int] | None) -> None:
        if receipt is None:
            return
        node, anchor = receipt
        while True:
            if node.host_value is None and not self.is_write_back:
                return
            node.host_lock_ref -= 1
            self._refresh(node)
            self._emit(ev.HostLockChanged(node.id, node.host_lock_ref, -1))
            if node.host_anchor == anchor:
                return
            node = node.parent

    def check_invariants(self: Any) -> None:
        """Raises InvariantError on the first broken rule: no dead node, each tier's slots as
        long as the key, whole pages and links (the tree's edge_problem), device nodes closed
        toward the root, sizes, host pool use, both leaf sets.

        >>> from radix.request import SlotAllocator
        >>> from radix.hosttier.cache import HostTierCache
        >>> c = HostTierCache(SlotAllocator(8), 8); _ = c.insert([1, 2], [1, 2])
        >>> c.evictable_size_ = 5; c.check_invariants()
        Traceback (most recent call last):
        ...
        radix.tree.invariants.InvariantError: evictable/protected 5/0, the tree holds 2/0
        """
        evictable = protected = host = 0
        for x in self._nodes.values():
            root = x is self.root_node
            problem = (edge_problem if root else _node_problem)(x, self.page_size)
            if problem:
                raise InvariantError(f"node {x.id}: {problem}")
            if root:
                continue
            host += len(x.host_value) if x.host_value is not None else 0
            if x.value is not None:
                if x.lock_ref:
                    protected += len(x.value)
                else:
                    evictable += len(x.value)
        if (evictable, protected) != (self.evictable_size_, self.protected_size_):
            raise InvariantError(f"evictable/protected {self.evictable_size_}/"
                                 f"{self.protected_size_}, the tree holds {evictable}/{protected}")
        if host != self.host.num_used:
            raise InvariantError(f"host pool uses {self.host.num_used}, the tree holds {host}")
        sets = (set(self.device_leaves), set(self.host_leaves))
        for x in self._nodes.values():
            self._refresh(x)
        if sets != (self.device_leaves, self.host_leaves):
            raise InvariantError("a leaf set is stale")


def _node_problem(x: HostNode, page_size: int) -> str | None:
    """The first rule `x` (not the root) breaks: its tiers, then the tree's own edge rules
    (radix/tree/invariants.py's edge_problem), then its place in the tree."""
    n = len(x.key)
    if x.value is None and x.host_value is None:
        return "on neither tier"
    if x.value is not None and len(x.value) != n or x.host_value is not None and \
            len(x.host_value) != n:
        return f"slots do not match its {n} tokens"
    problem = edge_problem(x, page_size)
    if problem:
        return problem
    if x.value is not None and x.parent.parent is not None and x.parent.value is None:
        return "on the device below a host-only parent"
    if x.parent.children.get(x.key.child_key(page_size)) is not x:
        return "not filed under its key in its parent"
    return None
