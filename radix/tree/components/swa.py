"""SWA: sliding-window attention's KV (SGLang 0.5.23's unified_cache/components/swa.py).

A node's SWA value is its tokens' slots in the SWA pool (the full slots translated through the
allocator's mapping). A hit needs a whole window of SWA data behind it (or none missing from the
root); eviction tombstones SWA inside the tree (the node and its FULL slots stay) and cascades to
MAMBA; an insert inside the request's window recovers a tombstone from the request's own slots;
a lock covers the last window of the path and stamps its boundary (`uuid`). Leaves out: host
values, the unified pool's page binding, sessions, the independent (auxiliary) window.
"""

from __future__ import annotations

from radix import events as ev
from radix.tree.components.base import SWA, LockReceipt, TreeComponent


def ceil_align(x: int, a: int) -> int:
    return -(-x // a) * a


class SWAComponent(TreeComponent):
    """Window `sliding_window_size` (SGLang's swa_retain_window).

    >>> from radix.tree.unified_radix_cache import UnifiedRadixCache
    >>> c = UnifiedRadixCache(("full", "swa"), sliding_window_size=4)
    >>> leaf = c.insert(list(range(10))).last_node  # a new leaf is capped at one window
    >>> len(leaf.parent.key), len(leaf.key), c.component_evictable_size(SWA)
    (6, 4, 10)
    """

    component_type = SWA
    internal_priority = 1

    def __init__(self, cache) -> None:
        super().__init__(cache)
        w = cache.sliding_window_size
        if not isinstance(w, int) or w <= 0:
            raise ValueError(f"the SWA component needs a sliding_window_size > 0, got {w!r}")
        self.window = w
        self._uuid = 0  # SGLang's next_component_uuid (one counter per cache here)

    def free_value(self, node, value) -> None:
        # SGLang passes the node's FULL slots: the allocator frees their SWA peers
        if self.cache.allocator is not None:
            self.cache.allocator.free_swa(node.value)

    def publish(self, node, recovered: bool = False) -> None:
        """The node's SWA value from its FULL slots (SGLang's SWARebuild action)."""
        a = self.cache.allocator
        value = a.translate(node.value) if a is not None else list(node.value)
        self.set_value(node, value, recovered)

    # ----------------------------------------------------------------------------- match
    def validator(self):
        """Accepts a node once the SWA data behind it since the last tombstone spans a
        window; from the root with no tombstone, every node with data is accepted."""
        window, state = self.window, [float("inf")]

        def accepts(node) -> bool:
            if node.component_data[SWA].value is None:
                state[0] = 0
                return False
            state[0] += len(node.value)
            return state[0] >= window

        return accepts

    def finalize_match(self, result):
        ps = self.cache.page_size
        aligned = result.full_kv_hit_length // ps * ps
        result.swa_branching_seqlen = aligned if aligned > result.prefix_len else None
        return result

    def _refresh_window(self, node) -> None:
        """The node and its ancestors within a window (+ a page) that hold SWA data become the
        most recent, the deepest first (reset_node_and_window_ancestors_mru: LRUList's
        reset_path_mru, done as the walk goes)."""
        cache = self.cache
        root, span = cache.root_node, self.window + cache.page_size
        prev, acc, place_after = self.lru.head, 0, self.lru.place_after
        while node is not root and acc < span:
            cd = node.component_data[SWA]
            if cd.value is not None:
                place_after(prev, cd)
                prev = cd
            acc += len(node.value)
            node = node.parent

    refresh_match_end = refresh_insert_end = _refresh_window

    # ----------------------------------------------------------------------- split, insert
    def on_split(self, new, child) -> None:
        cn, cc = new.component_data[SWA], child.component_data[SWA]
        cn.lock_ref = cc.lock_ref
        if cc.value is not None:
            k = len(new.key)
            cn.value, cc.value = cc.value[:k], cc.value[k:]
            self.lru.insert_after(cc, cn)
        cn.uuid, cc.uuid = cc.uuid, None  # the window boundary marks the older edge

    def _clip(self, node, start: int, end: int, window_start: int) -> int | None:
        """Where a tombstone's live part (inside the window) starts, splitting it there; None
        when the node has SWA data or lies wholly before the window."""
        if node.component_data[SWA].value is not None:
            return None
        live = max(start, window_start)
        if live >= end:
            return None
        if live > start:
            self.cache.split_node(node, live - start)  # node keeps the live (deeper) part
        return live

    def insert_overlap(self, node, prefix_len: int, total: int, value, params, result) -> int:
        """A tombstone inside the request's window takes the request's slots for its live part
        (the request's SWA is live there); returns where the consumed slots start."""
        end = total + prefix_len
        if params.prev_prefix_len >= end:
            return prefix_len
        live = self._clip(node, total, end, params.swa_evicted_seqlen)
        if live is None:
            return prefix_len
        incoming = value[live:end]
        cache = self.cache
        if node.lock_ref > 0:  # a locked FULL value stays; its SWA peers move over
            a = cache.allocator
            swa = a.move_swa(node.value, incoming) if a is not None else list(node.value)
            cache.free_full_only(incoming)
            self.set_value(node, swa, recovered=True)
        else:
            old, node.value = node.value, list(incoming)
            cache.free_full_only(old)
            self.publish(node, recovered=True)
        return live - total

    def commit_insert(self, node, is_new_leaf: bool, params, result) -> None:
        b = params.swa_branching_seqlen
        if b is not None:
            result.swa_branch_inserted = len(params.key) >= b
        if not is_new_leaf:
            return
        start = result.prefix_len
        live = self._clip(node, start, start + len(node.value), params.swa_evicted_seqlen)
        if live is None:
            return  # the whole new leaf is out of the window: an SWA tombstone leaf
        parent = self._cap_leaf(node)
        if parent is not None:
            self.publish(parent)  # older first, so the tail stays the more recent
        self.publish(node)

    def _cap_leaf(self, leaf):
        """A fresh in-window leaf longer than a page-aligned window splits so that a lock on
        it pins one window of SWA slots (SGLang's _maybe_split_leaf_for_swa_lock)."""
        if leaf.component_data[SWA].lock_ref > 0:
            return None
        tail = ceil_align(self.window, self.cache.page_size)
        n = len(leaf.value)  # (as long as its key)
        if n <= tail:
            return None
        return self.cache.split_node(leaf, n - tail)

    # ------------------------------------------------------------------------------ locks
    def acquire(self, node, receipt: LockReceipt) -> LockReceipt:
        """lock_ref += 1 on every node of the last window (tombstones too), stamping the node
        where the window fills; the receipt keeps that uuid (None: the walk hit the root)."""
        cache = self.cache
        root, covered, uuid, sizes_moved = cache.root_node, 0, None, 0
        window, sink = self.window, cache._sink
        x = node
        while x is not root:
            cd = x.component_data[SWA]
            ref = cd.lock_ref
            moved = len(cd.value) if ref == 0 and cd.value is not None else 0
            sizes_moved += moved
            cd.lock_ref = ref + 1
            if sink is not None:
                sink.emit(ev.ComponentLockChanged(x.id, "swa", ref + 1, 1, moved))
            covered += len(x.value)
            if covered >= window:  # the window fills here: its boundary's stamp
                uuid = cd.uuid
                if uuid is None:
                    self._uuid += 1
                    uuid = cd.uuid = self._uuid
                break
            x = x.parent
        if sizes_moved:
            cache.evictable_size_[SWA] -= sizes_moved
            cache.protected_size_[SWA] += sizes_moved
        return tuple.__new__(LockReceipt, (receipt.node_id, receipt.skipped, uuid))

    def release(self, node, receipt: LockReceipt) -> None:
        self._unlock_window(node, receipt.swa_uuid)

    def release_window_lock(self, node, uuid: int | None) -> None:
        """dec_swa_lock_only's SWA part: the same walk; a device leaf it unlocks loses its
        SWA slots at once."""
        self._unlock_window(node, uuid, early=True)

    def _unlock_window(self, node, uuid: int | None, early: bool = False) -> None:
        cache = self.cache
        root, x, sink = cache.root_node, node, cache._sink
        while x is not root:
            cd = x.component_data[SWA]
            ref = cd.lock_ref
            if ref <= 0:
                raise ValueError(f"SWA release hit lock_ref 0 on node {x.id}")
            moved = len(cd.value) if ref == 1 and cd.value is not None else 0
            cd.lock_ref = ref - 1
            if moved:
                cache.evictable_size_[SWA] += moved
                cache.protected_size_[SWA] -= moved
            if sink is not None:
                sink.emit(ev.ComponentLockChanged(x.id, "swa", ref - 1, -1, moved))
            # a node FULL still locks is no evictable leaf (and is not listed as one)
            if ref == 1 and x.lock_ref == 0:
                cache.update_leaf(x)
                if early and moved and x in cache.evictable_leaves:
                    self.evict_component(x, {SWA: 0}, cause="window")
            if uuid and cd.uuid == uuid:
                break
            x = x.parent

    # -------------------------------------------------------------------- a request's KV
    def prepare_for_caching_req(self, req, state, params, token_ids_len: int,
                                is_finished: bool) -> int | None:
        """The request's SWA cursor goes with the insert; without Mamba, a branch point past
        the protected prefix caps the insert there (so it lands with SWA data)."""
        params.swa_evicted_seqlen = state.swa_evicted_seqlen
        if self.cache.is_mamba_enabled:
            return None
        b = state.swa_branching_seqlen
        if b is None or b <= req.cache_protected_len or b > token_ids_len:
            return None
        params.swa_branching_seqlen = b
        return b

    def free_out_of_window_slots(self, req, state, pre_len: int, params) -> None:
        free_swa_out_of_window_slots(self.cache, req, state, pre_len)
        params.swa_evicted_seqlen = state.swa_evicted_seqlen

    def cleanup_after_caching_req(self, req, state, is_finished: bool, result=None,
                                  params=None) -> None:
        if result is not None and result.swa_branch_inserted:
            state.swa_branching_seqlen = None
            if not is_finished:
                free_swa_out_of_window_slots(self.cache, req, state, len(req.fill_ids) - 1)


def free_swa_out_of_window_slots(cache, req, state, pre_len: int, interval: int = 1) -> None:
    """A running request frees the SWA slots of positions that left its window (SGLang's
    common.py of the same name): from max(its cursor, cache_protected_len) up to pre_len less
    a page-aligned window, never past the last Mamba checkpoint's window (retain floor).

    Window 4, page 1, 12 tokens computed (pre_len 11), nothing protected: frees [0, 7).
    """
    w, ps = cache.sliding_window_size, cache.page_size
    if not req.slot_ids:
        return
    evicted = state.swa_evicted_seqlen
    if pre_len - w < evicted + interval:
        return
    evicted = state.swa_evicted_seqlen = max(evicted, req.cache_protected_len)
    threshold = pre_len - ceil_align(max(w, ps), ps)
    floor = cache.swa_retain_floor(state)
    if floor is not None:
        threshold = min(threshold, floor)
    new = max(evicted, threshold)
    new -= new % ps
    if new > evicted:
        if cache.allocator is not None:
            cache.allocator.free_swa(req.slot_ids[evicted:new])
        state.swa_evicted_seqlen = new
        if cache._sink is not None:
            cache._sink.emit(ev.SlidingWindowFreed(req.rid, evicted, new))
