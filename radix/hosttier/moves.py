"""The moves between tiers of HostTierCache: backup, device eviction (demote or drop), host
eviction, load back. A mixin over the tree in cache.py.

Follows SGLang 0.5.23: UnifiedRadixCache._evict_components / _execute_and_commit_kv_backup /
evict_host / load_back / init_load_back (unified_radix_cache.py) and the TreeCore's
evict_device_leaf, drop_subtree_no_host, _demote, drive_host_eviction,
_reclaim_full_host_duplicates, build_load_back_spec and commit_load_back
(unified_cache/unified_tree_core.py, components/full.py). Eviction heaps are built per call
from the leaf sets with the policy's key (SGLang's heapify: radix/tree/evict_policy.py's
LeafOrder), ties to the older node id.
Leaves out: auxiliary-component transfers, buffer mode, the load-back pins of pending DMA
(transfers are synchronous, see cache.py).
"""

from __future__ import annotations

from typing import Any

from radix import events as ev
from radix.hosttier.node import HostMatch, HostNode, TierCounts
from radix.tree.evict_policy import LeafOrder
from radix.tree.node import detach


class TierMoves:
    """Mixin: needs the tree's fields and helpers (cache.py)."""

    # ------------------------------------------------------------------------------ backup

    def _backup_chain(self: Any, node: HostNode) -> None:
        """Write-through: the node and its unbacked ancestors, root side first; stops at the
        first copy the host cannot take."""
        chain, x = [node], node.parent
        while x is not None and x is not self.root_node and x.host_value is None:
            chain.append(x)
            x = x.parent
        for x in reversed(chain):
            if x.host_value is None and not self._backup(x, "write_through"):
                return

    def _backup(self: Any, node: HostNode, reason: str) -> bool:
        """Copies node's device KV to host slots, evicting host leaves for the shortfall."""
        n = len(node.value)
        short = n - self.host.available_size()
        if short > 0 and self.evict_host(short) < short:
            return False
        slots = self.host.alloc(n)
        if slots is None:
            return False
        node.host_value = slots
        self._counts["backed_up"] += n
        self._emit(ev.KVBackedUp(node.id, n, tuple(slots), reason))
        self._track_duplicate(node)  # the ack: a settled copy on both tiers
        return True

    # ---------------------------------------------------------------------- device eviction

    def evict(self: Any, num_tokens: int) -> int:
        """Frees at least num_tokens device tokens (or all it can): device leaves in policy
        order; a backed-up leaf is demoted (kept on host), an unbacked one dropped under
        write-through, backed up then demoted under write-back. A parent left without device
        children competes in the same call. Returns the device tokens freed.

        Write-through (every insert backs up), device of 4: [1 2 3 4] is demoted to host.
        >>> from radix.hosttier.cache import HostTierCache
        >>> from radix.request import SlotAllocator
        >>> c = HostTierCache(SlotAllocator(4), 8); _ = c.insert([1, 2, 3, 4], c.allocator.alloc(4))
        >>> c.evict(1), c.allocator.available_size(), c.match_prefix([1, 2, 3, 4]).host_hit_length
        (4, 4, 4)
        """
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        order = LeafOrder(self.device_leaves, self.sort_key)
        freed, last = 0, None
        while True:
            if last is not None and last.parent in self.device_leaves:
                order.push(last.parent)
            last = None
            while freed < num_tokens and order:
                x = order.pop()
                if x in self.device_leaves:
                    last = x
                    break
            if last is None:
                return freed
            freed += self._evict_device_leaf(last)

    def _evict_device_leaf(self: Any, x: HostNode) -> int:
        if x.host_value is not None:
            return self._demote(x)
        if not self.is_write_back:
            return self._delete_device_leaf(x, "write_through_unbacked")
        if self._backup(x, "write_back"):
            return self._demote(x)
        return self._drop_subtree(x)

    def _demote(self: Any, x: HostNode) -> int:
        slots, x.value = x.value, None
        n = len(slots)
        self.allocator.free(slots)
        self.evictable_size_ -= n
        self._counts["demoted"] += n
        self._emit(ev.NodeDemoted(x.id, n, tuple(slots)))
        self._refresh(x)
        self._refresh(x.parent)
        return n

    def _delete_device_leaf(self: Any, x: HostNode, reason: str) -> int:
        n = len(x.value)
        self.allocator.free(x.value)
        self.evictable_size_ -= n
        self._counts["dropped_unbacked" if reason.startswith("write") else
                     "dropped_host_pressure"] += n
        self._remove(x)
        self._emit(ev.DeviceLeafDropped(x.id, x.parent.id, n, reason))
        self._refresh(x.parent)
        return n

    def _drop_subtree(self: Any, x: HostNode) -> int:
        """Write-back, host full: drop x and its host-only subtree unless any of it is locked
        (then x stays on the device: 0 freed)."""
        below, stack = [], list(x.children.values())
        if x.lock_ref or x.host_lock_ref:
            return 0
        while stack:
            d = stack.pop()
            if d.lock_ref or d.host_lock_ref:
                return 0
            below.append(d)
            stack.extend(d.children.values())
        for d in reversed(below):
            n = len(d.host_value)
            self.host.free(d.host_value)
            d.host_value = None
            self.host_leaves.discard(d)
            self._remove(d)
            self._emit(ev.HostLeafEvicted(d.id, d.parent.id, n))
        return self._delete_device_leaf(x, "host_pressure")

    # ------------------------------------------------------------------------ host eviction

    def evict_host(self: Any, num_tokens: int) -> int:
        """Frees at least num_tokens host tokens: under write-back, host copies of nodes still
        on the device first (sparing device leaves on a first pass), then host-only leaves in
        policy order, deleting them; a parent left childless competes in the same call."""
        freed = self._reclaim_duplicates(num_tokens) if self.is_write_back else 0
        order = LeafOrder(self.host_leaves, self.sort_key)
        while freed < num_tokens and order:
            x = order.pop()
            if x not in self.host_leaves:
                continue
            n, parent = len(x.host_value), x.parent
            self.host.free(x.host_value)
            x.host_value = None
            self.host_leaves.discard(x)
            self._remove(x)
            freed += n
            self._counts["host_evicted"] += n
            self._emit(ev.HostLeafEvicted(x.id, parent.id, n))
            self._refresh(parent)
            if parent in self.host_leaves:
                order.push(parent)
        return freed

    def _reclaim_duplicates(self: Any, num_tokens: int) -> int:
        freed, swept = 0, []
        for spare_leaves in (True, False):
            for x in self.duplicates.values():
                if freed >= num_tokens:
                    break
                if x.value is None or x.host_value is None:
                    swept.append(x.id)  # a stale entry
                    continue
                if (spare_leaves and x in self.device_leaves) or x.host_lock_ref:
                    continue
                freed += len(x.host_value)
                self._counts["reclaimed"] += len(x.host_value)
                self.host.free(x.host_value)
                self._emit(ev.HostCopyReclaimed(x.id, len(x.host_value)))
                x.host_value = None
                swept.append(x.id)
        for i in swept:
            self.duplicates.pop(i, None)
        return freed

    def _track_duplicate(self: Any, x: HostNode) -> None:
        """full_host_duplicates: registered in order where copies on both tiers appear (an
        ack, a split, a restore, a load back), dropped lazily (write-back reclaims them)."""
        if self.is_write_back:
            if x.value is not None and x.host_value is not None and x is not self.root_node:
                self.duplicates.setdefault(x.id, x)
            else:
                self.duplicates.pop(x.id, None)

    # ---------------------------------------------------------------------------- load back

    def load_back(self: Any, node: HostNode, mem_quota: int | None = None) -> int:
        """Loads the host-only nodes from `node` up to the device prefix onto the device, all
        or nothing; returns the tokens loaded (0: declined, under the threshold, over the
        quota, or the device could not make room)."""
        receipt = self.inc_host_lock_ref(node)
        delta = self.inc_lock_ref(node)
        nodes, x = [], node
        while x.value is None:
            nodes.append(x)
            x = x.parent
        nodes.reverse()
        n = sum(len(x.host_value) for x in nodes)
        room = n <= self.allocator.available_size()
        if n >= max(1, self.load_back_threshold) and (mem_quota is None or n + delta <= mem_quota):
            if not room:
                self.evict(n - self.allocator.available_size())
                room = n <= self.allocator.available_size()
        else:
            room = False
        slots = self.allocator.alloc(n) if room else None
        self.dec_lock_ref(node)
        if slots is None:
            self.dec_host_lock_ref(receipt)
            return 0
        at = 0
        for x in nodes:
            x.value = slots[at:at + len(x.host_value)]
            at += len(x.value)
            if x.lock_ref > 0:
                self.protected_size_ += len(x.value)
            else:
                self.evictable_size_ += len(x.value)
            self._refresh(x)
        self._refresh(node)
        self._counts["loaded_back"] += n
        self._emit(ev.KVLoadedBack(tuple(x.id for x in nodes), n, tuple(slots)))
        self.inc_lock_ref(node)  # held until the load's ack: synchronous here
        self.dec_lock_ref(node)
        self.dec_host_lock_ref(receipt)
        for x in reversed(nodes):  # finish_load_back walks from the anchor up
            self._track_duplicate(x)
        return n

    def init_load_back(self: Any, match: HostMatch, mem_quota: int | None = None
                       ) -> tuple[int, HostNode]:
        """The scheduler's admission step: load a host hit back; (tokens loaded, the node the
        request's device prefix now ends at)."""
        node = match.best_match_node
        if node.value is None or match.host_hit_length > 0:
            loaded = self.load_back(node, mem_quota)
            if loaded:
                return loaded, node
        return 0, match.last_device_node

    # ------------------------------------------------------------------------------ reading

    def _remove(self: Any, x: HostNode) -> None:
        detach(x, self.page_size)
        del self._nodes[x.id]
        self.duplicates.pop(x.id, None)
        self.device_leaves.discard(x)

    def counts(self: Any) -> TierCounts:
        return TierCounts(**self._counts)

    def nodes(self: Any) -> list[HostNode]:
        return list(self._nodes.values())

    def node(self: Any, node_id: int) -> HostNode:
        """The live node with this id (an event's node_id); KeyError once it is removed."""
        return self._nodes[node_id]
