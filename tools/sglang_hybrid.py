"""SGLang 0.5.23's UnifiedRadixCache with SWA or MAMBA components, built on CPU over its own pools
(not a test): SWATokenToKVPoolAllocator (its full and SWA TokenToKV / Paged allocators and the
full -> SWA mapping) over a KV pool that holds no tensors, and HybridReqToTokenPool (its
MambaSlotAllocator, ping-pong track buffers, free_mamba_cache, donate) over a Mamba pool that
holds no states. Stubbed, beside what tools/sglang_unified.py stubs: the KV and state tensors
(a copy-on-write or a state copy is a no-op), and the runtime context the Mamba component reads
(mamba_cache_chunk_size, mamba_checkpoint_grid, mamba_max_states_per_path).

`build_hybrid` returns the cache; `SGReq` is the request the cache and common.py read, with
SGLang's own ReqKvInfo as its `kv`.
"""

from __future__ import annotations

import math
from array import array
from types import SimpleNamespace

import torch
from sglang_unified import CORES


def patch_runtime(usg, chunk: int, max_states_per_path: int) -> None:
    """The runtime context a server publishes: the model's Mamba chunk size and path cap."""
    from sglang.srt.mem_cache.rust_tree_core import adapter
    from sglang.srt.mem_cache.unified_cache.components import mamba

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
