"""MAMBA: a linear-attention / SSM state per node (SGLang 0.5.23's unified_cache/components/
mamba.py). A node's value is one state slot: the recurrent state after the node's last token.
A hit must end on a node with a state; a split leaves the new upper node without one; the
match reports `mamba_branching_seqlen`, the checkpoint-grid point below FULL's hit where a
request should keep a state so that the next one hits there. Locks take the node alone.

The request side: with the extra buffer (`enable_mamba_extra_buffer`, strategy "extra_buffer")
a request tracks states in two ping-pong slots and donates the latest at a checkpoint; without
it ("no_buffer") the state at the end of what is cached is forked (unfinished) or handed over
(finished). Leaves out: host values, the int8 checkpoint pool, the lazy buffer, ReplaySSM.
"""

from __future__ import annotations

import math

from radix import events as ev
from radix.tree.components.base import MAMBA, LockReceipt, TreeComponent


class MambaComponent(TreeComponent):
    """Checkpoint grid lcm(max(mamba_chunk_size, page), page) (SGLang's
    mamba_checkpoint_grid); the path cap `mamba_max_states_per_path` (-1: none).

    >>> from radix.tree.unified_radix_cache import UnifiedRadixCache, InsertParams
    >>> from radix.tree.key import RadixKey
    >>> c = UnifiedRadixCache(("full", "mamba"), mamba_chunk_size=64, page_size=16)
    >>> c.components[MAMBA].checkpoint_grid
    64
    """

    component_type = MAMBA
    internal_priority = 0

    def __init__(self, cache) -> None:
        super().__init__(cache)
        ps = cache.page_size
        chunk = cache.mamba_chunk_size
        if not isinstance(chunk, int) or chunk < 1 or max(chunk, ps) % min(chunk, ps):
            raise ValueError(f"mamba_chunk_size {chunk!r} and page_size {ps} must divide one "
                             "another (SGLang asserts it)")
        self.cache_chunk_size = max(chunk, ps)  # SGLang's mamba_cache_chunk_size()
        self.checkpoint_grid = math.lcm(self.cache_chunk_size, ps)
        self.max_states_per_path = cache.mamba_max_states_per_path

    def size_of(self, value) -> int:
        return 1

    def free_value(self, node, value) -> None:
        if self.cache.mamba_pool is not None:
            self.cache.mamba_pool.free(value)

    # ----------------------------------------------------------------------------- match
    def validator(self):
        return lambda node: node.component_data[MAMBA].value is not None

    def finalize_match(self, result):
        """The grid point below FULL's hit, when it lies past the hit: a request keeping a
        state there lets the next request hit that far."""
        g = self.checkpoint_grid
        aligned = result.full_kv_hit_length // g * g
        result.mamba_branching_seqlen = aligned if aligned > result.prefix_len else None
        return result

    def refresh_match_end(self, node) -> None:
        cd = node.component_data[MAMBA]
        if cd.value is not None:
            self.lru.reset_mru(cd)  # only the state the hit uses, not its ancestors'

    # ----------------------------------------------------------------------------- insert
    def commit_insert(self, node, is_new_leaf: bool, params, result) -> None:
        """The offered state lands on the last node unless it has one (then `mamba_exist`:
        the offer is the caller's to free)."""
        if params.mamba_value is None:
            raise ValueError("an insert into a tree with MAMBA needs a mamba_value (the state "
                             "at the key's end)")
        cd, cache = node.component_data[MAMBA], self.cache
        if cd.value is None:
            self.set_value(node, list(params.mamba_value))
            if not is_new_leaf:
                node.last_access_time = cache.clock()
            self._evict_excess_path_states(node)
            return
        self.lru.reset_mru(cd)
        node.last_access_time = cache.clock()
        result.mamba_exist = True

    def _evict_excess_path_states(self, tail) -> None:
        """Past the path cap, the shallowest states go (their FULL slots stay); kept: the
        tail, forks, locked states and evictable leaves."""
        cap = self.max_states_per_path
        if cap < 0:
            return
        cache, holders, x = self.cache, [], tail
        while x is not cache.root_node:
            if x.component_data[MAMBA].value is not None:
                holders.append(x)
            x = x.parent
        excess = len(holders) - cap
        tracker = dict.fromkeys(cache.tree_components, 0)
        for x in reversed(holders):
            if excess <= 0 or x is tail:
                break
            if x.component_data[MAMBA].lock_ref > 0 or len(x.children) != 1:
                continue
            if x in cache.evictable_leaves:
                continue
            self.evict_component(x, tracker, cause="path_cap")
            excess -= 1

    # ------------------------------------------------------------------------------ locks
    def acquire(self, node, receipt: LockReceipt) -> LockReceipt:
        if node is not self.cache.root_node:
            self._lock(node, 1)
        return receipt

    def release(self, node, receipt: LockReceipt) -> None:
        if node is not self.cache.root_node:
            self._lock(node, -1)
            # a node FULL still locks is no evictable leaf (and is not listed as one)
            if node.component_data[MAMBA].lock_ref == 0 and node.lock_ref == 0:
                self.cache.update_leaf(node)

    def _lock(self, node, delta: int) -> None:
        cd, cache = node.component_data[MAMBA], self.cache
        if delta < 0 and cd.lock_ref <= 0:
            raise ValueError(f"MAMBA release hit lock_ref 0 on node {node.id}")
        edge = 0 if delta > 0 else 1
        moved = 1 if cd.lock_ref == edge and cd.value is not None else 0
        cd.lock_ref += delta
        cache.evictable_size_[MAMBA] -= delta * moved
        cache.protected_size_[MAMBA] += delta * moved
        if cache._sink is not None:
            cache._sink.emit(ev.ComponentLockChanged(node.id, "mamba", cd.lock_ref, delta, moved))

    # -------------------------------------------------------------------- a request's KV
    def alloc_slot(self) -> int:
        """One state slot, evicting a cached state when none is free (_alloc_mamba_slot)."""
        pool = self.cache.mamba_pool
        got = pool.alloc(1)
        if got is None:
            self.cache.evict_for_alloc(mamba_num=1)
            got = pool.alloc(1)
            if got is None:
                raise RuntimeError("no Mamba state slot left (max_mamba_cache_size too small)")
        return got[0]

    def prepare_for_caching_req(self, req, state, params, token_ids_len: int,
                                is_finished: bool) -> int | None:
        """The state to insert and how far the insert may go: the last tracked state's depth
        (extra buffer) or the whole key (no buffer); finished: handed over, else donated
        (extra buffer: the ping-pong slot, replaced by a fresh one) or forked (no buffer)."""
        extra = self.cache.enable_mamba_extra_buffer
        cache_len = state.mamba_last_track_seqlen if extra else token_ids_len
        if is_finished:
            if not extra:
                params.mamba_value = [state.mamba_pool_idx]
                return cache_len
            chosen = self._select_finished_checkpoint(state, token_ids_len)
            if chosen is None:
                return 0
            cache_len, keep = chosen
            params.mamba_keep_idx = keep
            params.mamba_value = [state.mamba_ping_pong_track_buffer[keep]]
            return cache_len
        if cache_len is None:
            return 0
        new = self.alloc_slot()
        if extra:
            buf, idx = state.mamba_ping_pong_track_buffer, state.mamba_last_track_idx
            params.mamba_value, buf[idx] = [buf[idx]], new
        else:
            params.mamba_value = [new]  # a copy of the working state
        return cache_len

    def _select_finished_checkpoint(self, state, token_ids_len: int):
        keep = state.mamba_last_track_idx
        cache_len = state.mamba_last_track_seqlen or 0
        if cache_len <= token_ids_len:
            return cache_len, keep
        prev = state.mamba_prev_track_seqlen  # overshoot: the other slot's, if it fits
        if len(state.mamba_ping_pong_track_buffer) != 2 or prev is None or prev > token_ids_len:
            return None
        return prev, 1 - keep

    def cleanup_after_caching_req(self, req, state, is_finished: bool, result=None,
                                  params=None) -> None:
        if is_finished:
            inserted = result is not None and not result.mamba_exist
            if self.cache.enable_mamba_extra_buffer:
                keep = params.mamba_keep_idx if params is not None and inserted else None
                self.free_mamba_cache(state, keep)
            elif not inserted:
                self.free_mamba_cache(state)
            else:
                state.mamba_pool_idx = None  # handed to the tree
            return
        if params.mamba_value is not None and (result is None or result.mamba_exist):
            self.cache.mamba_pool.free(params.mamba_value)
        state.mamba_last_track_seqlen = state.mamba_prev_track_seqlen = None

    def free_mamba_cache(self, state, keep: int | None = None) -> None:
        """The request's working slot and its ping-pong slots but `keep` go back."""
        pool = self.cache.mamba_pool
        if state.mamba_pool_idx is not None:
            pool.free([state.mamba_pool_idx])
        state.mamba_pool_idx = None
        buf = state.mamba_ping_pong_track_buffer
        if self.cache.enable_mamba_extra_buffer and buf is not None:
            rest = [s for p, s in enumerate(buf) if p != keep and s is not None]
            if rest:
                pool.free(rest)
            state.mamba_ping_pong_track_buffer = None
            state.mamba_next_track_idx = state.mamba_last_track_idx = None
            state.mamba_last_track_seqlen = state.mamba_prev_track_seqlen = None
            state.mamba_cow_src_index = None
