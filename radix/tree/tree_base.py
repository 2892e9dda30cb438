"""The parts of RadixCache that keep sizes and the evictable-leaf set: locks, evict, requests.

Follows SGLang's RadixCache: inc_lock_ref / dec_lock_ref walk to the root moving each node's
tokens between evictable and protected on 0 <-> 1 transitions; evict pops leaves in policy order
and lets a parent that becomes an unlocked leaf compete in the same call; cache_finished_req and
cache_unfinished_req insert a request's tokens, free its duplicate slots and move its lock.
Leaves out: SGLang's req_to_token_pool (a Req carries its own slot_ids row here).
"""

from __future__ import annotations

import heapq

from radix import events as ev
from radix.sched.request import Req
from radix.tree.inspect import TreeInspection
from radix.tree.key import RadixKey
from radix.tree.node import EvictResult, TreeNode


class TreeBase(TreeInspection):
    """Mixin for RadixCache (radix/tree.py); see there for the attributes it uses."""

    # ------------------------------------------------------------------ the evictable-leaf set

    def _update_leaf_status(self, node: TreeNode) -> None:
        """node is an evictable leaf iff it is live, unlocked, not the root and has no child.

        subtle: children are always live here (evict deletes a leaf from its parent), so "no
        live child" is "no child", as in SGLang's plain RadixCache.
        """
        is_leaf = node.lock_ref == 0 and not node.children and node.value is not None
        if is_leaf == (node in self.evictable_leaves):
            return
        if is_leaf:
            self.evictable_leaves.add(node)
            self._heap_push(node)
        else:
            self.evictable_leaves.discard(node)  # its heap entry goes stale
        if self._sink is not None:
            ids = (node.id,)
            self._emit(ev.LeafSetChanged(ids, ()) if is_leaf else ev.LeafSetChanged((), ids))

    # ----------------------------------------------------------------------------------- locks

    def _inc_lock(self, node: TreeNode) -> int:
        if self.disable or node is self.root_node:
            return 0  # the root's lock_ref stays 1: locking it is a no-op, as in SGLang
        self._held[node] = self._held.get(node, 0) + 1
        start, root, delta = node, self.root_node, 0
        sink = self._sink
        while node is not root:
            moved = 0
            if node.lock_ref == 0:
                moved = len(node.key)
                self.evictable_size_ -= moved
                self.protected_size_ += moved
                delta -= moved
            node.lock_ref += 1
            if sink is not None:
                sink.emit(ev.LockChanged(node.id, node.lock_ref, +1, moved))
            node = node.parent
        # only the start node can be a leaf: every node above it has a child
        self._update_leaf_status(start)
        return delta

    def _dec_lock(self, node: TreeNode) -> int:
        if self.disable or node is self.root_node:
            return 0
        held = self._held[node] - 1
        if held:
            self._held[node] = held
        else:
            del self._held[node]
        start, root, delta = node, self.root_node, 0
        sink = self._sink
        while node is not root:
            moved = 0
            if node.lock_ref == 1:
                moved = len(node.key)
                self.evictable_size_ += moved
                self.protected_size_ -= moved
                delta += moved
            node.lock_ref -= 1
            if sink is not None:
                sink.emit(ev.LockChanged(node.id, node.lock_ref, -1, moved))
            node = node.parent
        self._update_leaf_status(start)
        return delta

    # ------------------------------------------------------------------------------- eviction

    def _evict(self, num_tokens: int) -> EvictResult:
        if self.disable:
            return EvictResult(0, [])
        heap, leaves = self._heap, self.evictable_leaves
        evicted: list[TreeNode] = []
        num_evicted = 0
        while num_evicted < num_tokens and heap:
            sort_key, _, version, node = heapq.heappop(heap)
            if version != node.heap_version or node not in leaves:
                continue  # stale: the node changed, was locked, grew a child or is gone
            num_evicted += len(node.value)
            self._delete_leaf(node, sort_key)
            evicted.append(node)
        return EvictResult(num_evicted, evicted)

    def _delete_leaf(self, node: TreeNode, sort_key) -> None:
        parent = node.parent
        del parent.children[node.key.child_key(self.page_size)]
        del self._nodes[node.id]
        self.evictable_leaves.discard(node)
        self.evictable_size_ -= len(node.key)
        slot_ids, node.value = node.value, None  # evicted
        self._free(slot_ids)
        if self._sink is not None:
            self._emit(ev.LeafSetChanged((), (node.id,)))
            self._emit(ev.NodeEvicted(node.id, parent.id, len(slot_ids), tuple(slot_ids), sort_key))
        self._update_leaf_status(parent)  # it may become a candidate in this same call

    # -------------------------------------------------------------------------------- requests

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        """A request finished: cache its tokens, free what the tree already had, drop its lock.

        The KV of the last output token was never computed, so len(req.slot_ids) tokens are
        committed. Slots [cache_protected_len, prefix_len) duplicate cached ones and are freed,
        as is the unaligned tail past the last full page.

        >>> from radix.sched.allocator import SlotAllocator
        >>> from radix.tree.radix_cache import RadixCache
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], output_ids=[7], slot_ids=a.alloc(3))
        >>> c.cache_finished_req(r); c.total_size(), a.available_size()
        (3, 5)
        """
        self._begin("cache_finished_req", req.rid, "{:,} tokens", len(req.slot_ids))
        committed = len(req.slot_ids)
        slots = req.slot_ids
        if self.disable:
            self._free(slots[:committed])
        else:
            token_ids = (req.origin_input_ids + req.output_ids)[:committed]
            aligned = committed // self.page_size * self.page_size
            key = RadixKey(token_ids[:aligned], req.extra_key, req.cache_salt)
            if is_insert:
                result = self._insert(key, slots[:aligned], req.priority or 0, False)
                self._free(slots[req.cache_protected_len : result.prefix_len])
            else:
                self._free(slots[req.cache_protected_len : aligned])
            self._free(slots[aligned:])
            if req.last_node is not None:
                self._dec_lock(req.last_node)
        req.last_node = None
        self._end("cache_finished_req")

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """A request's prompt (or chunk) is computed: cache req.fill_ids and lock them for it.

        After the insert the request reads its prefix from the tree (its duplicate slots are
        freed), and its lock moves from the old last node to the new one.
        """
        if self.disable:
            # SGLang's ChunkCache: nothing is cached, but the request's own computed slots are
            # its prefix for the next chunk (PrefillAdder.add_chunked_req reads them).
            req.prefix_indices = req.slot_ids[: len(req.fill_ids)]
            return
        self._begin("cache_unfinished_req", req.rid, "{:,} tokens", len(req.fill_ids))
        n = len(req.fill_ids)
        slots = req.slot_ids[:n]
        aligned = n // self.page_size * self.page_size
        key = RadixKey(req.fill_ids[:aligned], req.extra_key, req.cache_salt)
        result = self._insert(key, slots[:aligned], req.priority or 0, chunked)
        self._free(slots[req.cache_protected_len : result.prefix_len])
        match = self._match(key)
        new_indices, new_last = match.slot_ids, match.last_node
        assert len(new_indices) == aligned, (len(new_indices), aligned)
        p = req.cache_protected_len
        req.slot_ids[p : len(new_indices)] = new_indices[p:]
        req.cache_protected_len = len(new_indices)
        if req.last_node is not None:
            self._dec_lock(req.last_node)
        self._inc_lock(new_last)
        req.prefix_indices = new_indices + slots[len(new_indices) :]
        req.last_node = new_last
        self._end("cache_unfinished_req")
