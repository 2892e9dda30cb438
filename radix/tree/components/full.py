"""FULL: full attention's KV, the component every unified tree has (SGLang 0.5.23's
unified_cache/components/full.py). Its data is the node's own `value` and `lock_ref`: a path
lock from the node to the root, evicted only as whole leaves (the tree's evictable-leaf heap,
in policy order), never tombstoned inside the tree. Leaves out: host values and host locks.
"""

from __future__ import annotations

from radix import events as ev
from radix.tree.components.base import FULL, LockReceipt, TreeComponent


class FullComponent(TreeComponent):
    """The path every other component hangs on.

    >>> from radix.tree.unified_radix_cache import UnifiedRadixCache
    >>> c = UnifiedRadixCache(); leaf = c.insert([1, 2, 3]).last_node
    >>> _ = c.inc_lock_ref(leaf); c.evictable_size(), c.protected_size()
    (0, 3)
    """

    component_type = FULL
    internal_priority = 2

    def has_data(self, node) -> bool:
        return node.value is not None

    def lock_ref(self, node) -> int:
        return node.lock_ref

    def validator(self):
        return lambda node: node.value is not None

    def evict_component(self, node, tracker: dict, free: bool = True) -> int:
        """A leaf's FULL slots go back (the full pool only: SWA frees its peers itself);
        free=False: counted only, the caller frees them (with their SWA peers)."""
        n = len(node.value)
        if free:
            self.cache.free_full_only(node.value)
        self.cache.evictable_size_[FULL] -= n
        tracker[FULL] += n
        return n

    def acquire(self, node, receipt: LockReceipt) -> LockReceipt:
        """lock_ref += 1 from node to the root; a node's tokens become protected on 0 -> 1."""
        cache = self.cache
        root, sink, moved_total = cache.root_node, cache._sink, 0
        x = node
        if sink is None:
            while x is not root:
                if x.lock_ref == 0:
                    moved_total += len(x.value)
                x.lock_ref += 1
                x = x.parent
        while x is not root:
            moved = len(x.value) if x.lock_ref == 0 else 0
            moved_total += moved
            x.lock_ref += 1
            sink.emit(ev.LockChanged(x.id, x.lock_ref, 1, moved))
            x = x.parent
        cache.evictable_size_[FULL] -= moved_total
        cache.protected_size_[FULL] += moved_total
        return receipt

    def release(self, node, receipt: LockReceipt) -> None:
        """lock_ref -= 1 from node to the root; tokens back to evictable on 1 -> 0."""
        cache = self.cache
        root, sink, moved_total = cache.root_node, cache._sink, 0
        x = node
        while x is not root:
            ref = x.lock_ref
            if ref <= 1:
                if ref <= 0:
                    raise ValueError(f"FULL release hit lock_ref 0 on node {x.id}")
                moved = len(x.value)
                moved_total += moved
            else:
                moved = 0
            x.lock_ref = ref - 1
            if sink is not None:
                sink.emit(ev.LockChanged(x.id, ref - 1, -1, moved))
            x = x.parent
        cache.evictable_size_[FULL] += moved_total
        cache.protected_size_[FULL] -= moved_total
