"""SGLang 0.5.23's UnifiedRadixCache with SWA or MAMBA components, built on CPU over its own pools
(not a test): SWATokenToKVPoolAllocator (its full and SWA TokenToKV / Paged allocators and the
full -> SWA mapping) over a KV pool that holds no tensors, and HybridReqToTokenPool (its
MambaSlotAllocator, ping-pong track buffers, free_mamba_cache, donate) over a Mamba pool that
holds no states. Stubbed, beside what tools/sglang_unified.py stubs: the KV and state tensors
(a copy-on-write or a state copy is a no-op), and the runtime context the Mamba component reads
(mamba_cache_chunk_size, mamba_checkpoint_grid, mamba_max_states_per_path) and the DeepSeek-V4
SWA-ring gate (off).

`build_hybrid` returns the cache; `SGReq` is the request the cache and common.py read, with
SGLang's own ReqKvInfo as its `kv`.
"""

from __future__ import annotations

import importlib
import math
from array import array
from types import SimpleNamespace

import torch
from sglang_unified import CORES


def patch_runtime(usg, chunk: int, max_states_per_path: int) -> None:
    """The runtime context a server publishes: the model's Mamba chunk size and path cap."""
    from sglang.srt.mem_cache.rust_tree_core import adapter
    from sglang.srt.mem_cache.unified_cache.components import mamba

    gate = importlib.import_module("sglang.srt.layers.attention.dsv4.unified_kv_gate")  # stub
    gate.is_unified_kv_triton = lambda: False  # no DeepSeek-V4 SWA ring here
    mamba.mamba_cache_chunk_size = adapter.mamba_cache_chunk_size = lambda: chunk
    mamba.mamba_checkpoint_grid = lambda page: math.lcm(chunk, page)
    exec_ = SimpleNamespace(mamba=SimpleNamespace(
        mamba_max_states_per_path=max_states_per_path, enable_mamba_extra_buffer_lazy=False,
        mamba_track_interval=256))
    mamba.get_exec = adapter.get_exec = lambda: exec_


def swa_allocator(size: int, size_swa: int, page: int):
    """SGLang's SWATokenToKVPoolAllocator over a tensor-free SWA KV pool."""
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_swa_memory_pool import BaseSWAKVPool

    class CpuSWAPool(BaseSWAKVPool):
        """Only the mapping: translate_loc_from_full_to_swa reads it."""

        def __init__(self) -> None:
            self.full_to_swa_index_mapping = None

        def register_mapping(self, mapping) -> None:
            self.full_to_swa_index_mapping = mapping

        def translate_loc_from_full_to_swa(self, kv_indices):
            return self.full_to_swa_index_mapping[kv_indices]

        def get_state_buf_infos(self):
            raise NotImplementedError

        get_key_buffer = get_value_buffer = get_kv_buffer = set_kv_buffer = get_state_buf_infos

    return SWATokenToKVPoolAllocator(size, size_swa, page, torch.int64, "cpu", CpuSWAPool(),
                                     need_sort=False)


def fifo_pages(allocator) -> None:
    """A paged allocator whose freed pages go to the back of its free list, as ours do
    (SGLang puts them in front): free-list order is allocator policy, not cache semantics,
    and with it the two sides hand out the same slot ids."""
    def release(*page_ids):
        allocator.free_pages = torch.cat((allocator.free_pages, *page_ids))

    allocator._release_page_ids = release


def token_allocator(size: int, page: int):
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator

    if page == 1:
        return TokenToKVPoolAllocator(size, torch.int64, "cpu", None, need_sort=False)
    return PagedTokenToKVPoolAllocator(size, page, torch.int64, "cpu", None, need_sort=False)


def hybrid_req_pool(rows: int, width: int, mamba_size: int, extra_buffer: bool, overlap: bool):
    """SGLang's HybridReqToTokenPool whose Mamba pool keeps slot ids and no states."""
    from sglang.srt.mem_cache import memory_pool
    from sglang.srt.mem_cache.allocation_sizing import get_mamba_tracking_slots
    from sglang.srt.mem_cache.allocator.mamba import MambaSlotAllocator

    class CpuHybridPool(memory_pool.HybridReqToTokenPool):
        def __init__(self) -> None:
            memory_pool.ReqToTokenPool.__init__(self, rows, width, "cpu", False)
            self.mamba_ping_pong_track_buffer_size = get_mamba_tracking_slots(
                extra_buffer=True, overlap=overlap)
            self.mamba_initial_tracking_slots = get_mamba_tracking_slots(
                extra_buffer=extra_buffer, overlap=overlap)
            self.enable_mamba_extra_buffer = extra_buffer
            self.enable_mamba_extra_buffer_lazy = False
            self.enable_memory_saver = False
            self.start_layer, self.layer_transfer_counter, self.ple_window_cache = 0, None, None
            self.mamba_pool = SimpleNamespace(
                size=mamba_size, replayssm_write_pos=None, replayssm_spec_write_pos=None,
                copy_from=lambda src, dst: None, clear_slots=lambda idx: None)
            self.mamba_allocator = MambaSlotAllocator(size=mamba_size, device="cpu")
            self.mamba_ckpt_pool = None
            n = self.req_to_token.shape[0]
            self.req_index_to_mamba_index_mapping = torch.zeros(n, dtype=torch.int32)
            self.req_index_to_mamba_ping_pong_track_buffer_mapping = torch.zeros(
                (n, self.mamba_ping_pong_track_buffer_size), dtype=torch.int64)

    return CpuHybridPool()


def build_hybrid(usg, components: tuple, core: str, page: int, policy: str, config: dict,
                 pools: SimpleNamespace):
    """A UnifiedRadixCache with `components` over the `core` TreeCore and `pools`
    (allocator, req_to_token_pool); `pools.window`, `pools.extra_buffer` configure SWA and
    MAMBA as a server would."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    if core not in CORES:
        raise ValueError(f"core must be one of {CORES}, got {core!r}")
    types = tuple(ComponentType[c.upper()] for c in components)
    params = CacheInitParams(
        disable=False, req_to_token_pool=pools.req_to_token_pool,
        token_to_kv_pool_allocator=pools.allocator, page_size=page, eviction_policy=policy,
        eviction_policy_config=config or None, tree_components=types, tree_core_backend=core,
        sliding_window_size=pools.window, enable_mamba_extra_buffer=pools.extra_buffer)
    cache = usg.UnifiedRadixCache(params)
    got = type(cache.tree_core).__name__
    if (core == "rust") != got.startswith("Rust"):
        raise RuntimeError(f"asked for the {core} TreeCore, got {got}")
    return cache


class SGReq:
    """The Req attributes UnifiedRadixCache, its components and common.py read; `kv` is
    SGLang's own ReqKvInfo."""

    def __init__(self, rid: str, prompt, max_new_tokens: int, extra_key=None, cache_salt=None,
                 priority: int = 0) -> None:
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        self.rid, self.extra_key, self.cache_salt, self.priority = (
            rid, extra_key, cache_salt, priority)
        self.origin_input_ids = array("q", prompt)
        self.output_ids = array("q")
        self.max_new_tokens = max_new_tokens
        self.kv = ReqKvInfo()
        self.lock = self.last_node = None
        self.finished_len = self.session_id = self.kv_rotation_base = None
        self.finished_reason = self.session = None
        self.skip_radix_cache_insert = False
        self.prefix_len = self.extend_end = 0
        self.swa_branching_seqlen = self.mamba_branching_seqlen = None
        self.refresh_fill_ids()

    def refresh_fill_ids(self) -> None:
        self.full_untruncated_fill_ids = self.origin_input_ids + self.output_ids

    def get_fill_ids(self):
        return self.full_untruncated_fill_ids[: self.extend_end or None]

    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new_tokens

    def owned_kv_len(self) -> int:
        return self.kv.kv_committed_len

    def _compute_max_prefix_len(self, input_len: int) -> int:
        return max(input_len - 1, 0)


class SGSide:
    """SGLang's cache over its pools, driven by its own common.py and allocation.py, with the
    scheduler's steps around them transcribed from managers/ (their modules need a GPU stack):
    the prefill's and the decode's Mamba tracking, maybe_evict_swa, check_decode_mem.
    `knobs` carries the run's configuration (page, window, chunk, extra buffer, ...)."""

    def __init__(self, usg, knobs: SimpleNamespace) -> None:
        from sglang.srt.mem_cache import allocation, common

        self.common, self.allocation, self.k = common, allocation, knobs
        k = knobs
        patch_runtime(usg, k.chunk, k.max_states_per_path)
        mamba = "mamba" in k.components
        allocator = (swa_allocator(k.size, k.size_swa, k.page) if "swa" in k.components
                     else token_allocator(k.size, k.page))
        rows = (hybrid_req_pool(64, k.width, k.mamba_size, k.extra_buffer, k.overlap) if mamba
                else _plain_req_pool(64, k.width))
        self.pools = SimpleNamespace(allocator=allocator, req_to_token_pool=rows,
                                     window=k.window, extra_buffer=k.extra_buffer and mamba)
        self.tree = build_hybrid(usg, k.components, k.core, k.page, k.policy, k.config,
                                 self.pools)
        self.mamba = mamba

    def row(self, req):
        return self.pools.req_to_token_pool.req_to_token[req.kv.req_pool_idx]

    def match(self, req):
        fill = req.full_untruncated_fill_ids
        m = self.common.match_kv_cache(req, self.tree, fill, cow_mamba=self.mamba,
                                       max_prefix_len=len(fill) - 1)
        req.mamba_branching_seqlen = m.mamba_branching_seqlen
        if m.cache_protected_len is None:
            req.kv.cache_protected_len = req.prefix_len
        return m

    def lock(self, req) -> None:
        req.lock = self.tree.lock(req.last_node)

    def unlock(self, req) -> None:
        """Not admitted: unlock, and revert the copy-on-write slot (the scheduler's revert)."""
        self.tree.unlock(req.lock)
        req.lock = None
        if req.kv.holds_mamba:
            self.pools.req_to_token_pool.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
            req.kv.mamba_pool_idx = None
        req.kv.mamba_cow_src_index = None

    def admit(self, req) -> None:
        """alloc_req_slots (the Mamba capacity first) and the row's prefix."""
        rp = self.pools.req_to_token_pool
        self.allocation.ensure_mamba_capacity(rp, [req], self.tree)
        rp.alloc([req])
        if req.prefix_len:
            self.row(req)[: req.prefix_len] = self.tree.prefix_device_indices(req)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = req.prefix_len
        req.decode_batch_idx = 0

    def _alloc(self, req, start: int, n: int, reserve: int) -> None:
        a, ps = self.pools.allocator, self.k.page
        if reserve:
            self.common.evict_from_tree_cache(self.tree, reserve)
        row = self.row(req)
        if ps == 1:
            slots = a.alloc(n)
        else:
            last = torch.tensor([int(row[start - 1]) if start else -1])
            pre, seq = torch.tensor([start]), torch.tensor([start + n])
            slots = a.alloc_extend(pre, pre, seq, seq, last, n)
        assert slots is not None, f"{req.rid}: SGLang side out of KV slots"
        row[start: start + n] = slots
        req.kv.kv_committed_len = req.kv.kv_allocated_len = start + n

    def extend(self, req, end: int) -> None:
        start = req.kv.kv_committed_len
        n = end - start
        self._alloc(req, start, n, n + (self.k.page if self.k.page > 1 else 0))
        req.prefix_len = start
        req.extend_end = end
        if self.pools.extra_buffer:
            self._track_prefill(req, start, end)
        req.decode_batch_idx = 0
        if end < len(req.full_untruncated_fill_ids):
            self.common.checkpoint_kv_cache(req, self.tree)

    def _track_prefill(self, req, start: int, end: int) -> None:
        """ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend (no DCP, not lazy)."""
        k, rp = self.k, self.pools.req_to_token_pool
        chunk = max(k.chunk, k.page)
        grid, n = math.lcm(chunk, k.page), end - start
        if n < grid:
            return
        aligned = start + n // grid * grid
        track = end
        if start + n // k.chunk * k.chunk != aligned:
            track = aligned + 1
        req.kv.mamba_last_track_idx = req.kv.mamba_next_track_idx
        req.kv.mamba_next_track_idx = rp.get_mamba_ping_pong_other_idx(req.kv.mamba_next_track_idx)
        b = req.mamba_branching_seqlen
        if b is not None and start < b < track and (b - start) % chunk == 0:
            aligned = b
        req.kv.mamba_last_track_seqlen = aligned

    def prefill_done(self, req, token: int) -> bool:
        req.output_ids.append(token)
        req.refresh_fill_ids()
        if req.finished():
            self.common.release_kv_cache(req, self.tree, checkpoint=True)
            return True
        self.common.checkpoint_kv_cache(req, self.tree)
        return False

    def check_decode(self, reqs) -> bool:
        ps = self.k.page
        need = sum(1 for r in reqs if r.kv.kv_committed_len % ps == 0) * ps
        return self.pools.allocator.check_decode_capacity(num_tokens=need, tree_cache=self.tree)

    def decode(self, reqs, tokens) -> None:
        """prepare_for_decode (maybe_evict_swa, alloc_for_decode) and the result's tracking."""
        k, tree = self.k, self.tree
        if "swa" in k.components:
            for req in reqs:
                seqlen = len(req.origin_input_ids) + len(req.output_ids)
                due = seqlen - 1 - k.window >= req.kv.get_evicted_seqlen(
                    self._swa) + k.swa_interval
                if req.decode_batch_idx >= 1 and due:
                    tree.evict_sliding_windows(req, seqlen - 1, eviction_interval=1)
                if k.release_prefill_swa and req.decode_batch_idx >= k.window:
                    tree.release_swa_prefix_lock(req)
        self.common.evict_from_tree_cache(tree, len(reqs) * k.page)
        for req, token in zip(reqs, tokens):
            self._alloc(req, req.kv.kv_committed_len, 1, 0)
            req.decode_batch_idx += 1
            req.output_ids.append(token)
            req.refresh_fill_ids()
            if self.pools.extra_buffer:
                self._track_decode(req)

    @property
    def _swa(self):
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

        return ComponentType.SWA

    def _track_decode(self, req) -> None:
        """The result processor's _mamba_prefix_cache_update at a track boundary."""
        k, rp = self.k, self.pools.req_to_token_pool
        grid = math.lcm(math.lcm(max(k.chunk, k.page), k.page), k.track_interval)
        committed = req.kv.kv_committed_len
        if committed % grid:
            return
        track_idx = req.kv.mamba_next_track_idx
        req.kv.mamba_prev_track_seqlen = req.kv.mamba_last_track_seqlen
        req.kv.mamba_last_track_seqlen = committed
        req.kv.mamba_last_track_idx = track_idx
        req.kv.mamba_next_track_idx = rp.get_mamba_ping_pong_other_idx(track_idx)

    def release(self, req, checkpoint: bool) -> None:
        self.common.release_kv_cache(req, self.tree, checkpoint=checkpoint)


def _plain_req_pool(rows: int, width: int):
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    return ReqToTokenPool(rows, width, "cpu", False)
