"""A KV pool for a sliding-window hybrid (Gemma 3): full layers' and sliding layers' rows apart.

Follows SGLang 0.5.23's SWAKVPool (mem_cache/swa_memory_pool.py): full layers' K/V by full slot,
sliding layers' K/V by SWA slot, over radix's SWASlotAllocator (full and SWA slots taken in step,
the full -> SWA mapping). The tree and a request's row hold full slot ids; the runner translates
them for a sliding layer. An SWA row can go before its full slot: when the window has passed the
token or when the component tree tombstones it (radix/tree's UnifiedRadixCache frees both).
Leaves out: pages, the per-request SWA ring, the unified (virtual) pools, host offload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engine.arch import SLIDING
from engine.kv_pool import KVPool
from radix.tree.hybrid_pools import SWASlotAllocator


class SWAKVPool(KVPool):
    """K/V rows of full layers by full slot (1..size), of sliding layers by SWA slot
    (1..size_swa); `allocator` hands out both (a new SWASlotAllocator unless given one).
    A sliding layer's rows are read and written by SWA slot: the runner translates."""

    def __init__(self, size: int, size_swa: int, layer_types: Sequence[str], num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", allocator: Any = None) -> None:
        if size < 1 or size_swa < 1:
            raise ValueError(f"KV pool sizes must be >= 1 token, got {size} and {size_swa}")
        self.size_full, self.size_swa, self.size = size, size_swa, min(size, size_swa)
        self.layer_types = list(layer_types)
        self.swa_layer_ids = [i for i, t in enumerate(self.layer_types) if t == SLIDING]
        self.num_layers, self.num_kv_heads, self.head_dim = len(layer_types), num_kv_heads, head_dim
        self.dtype, self.device = dtype, torch.device(device)
        self._make_buffers([(size_swa if t == SLIDING else size) + 1 for t in self.layer_types])
        self._slots = allocator if allocator is not None else SWASlotAllocator(size, size_swa)

    @classmethod
    def for_model(cls, config: Any, size: int, dtype: torch.dtype, device: torch.device | str,
                  swa_ratio: float = 1.0, allocator: Any = None) -> SWAKVPool:
        """`swa_ratio`: SWA rows per full row (SGLang's --swa-full-tokens-ratio)."""
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)
        return cls(size, max(1, int(size * swa_ratio)), config.layer_types,
                   config.num_key_value_heads, head_dim, dtype, device, allocator)

    @property
    def total_bytes(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        row = self.num_kv_heads * self.head_dim * 2 * elem
        num_swa = len(self.swa_layer_ids)
        return row * ((self.num_layers - num_swa) * self.size_full + num_swa * self.size_swa)

    @property
    def allocator(self) -> Any:
        return self._slots

    def translate(self, full_ids: Sequence[int]) -> list[int]:
        return self._slots.translate(full_ids)

    def free_swa(self, full_ids: Sequence[int]) -> None:
        self._slots.free_swa(full_ids)

    def free_full(self, full_ids: Sequence[int]) -> None:
        self._slots.free_full(full_ids)

    def swa_available_size(self) -> int:
        return self._slots.swa_available_size()

    def full_available_size(self) -> int:
        return self._slots.full_available_size()

    @property
    def num_used(self) -> int:  # full slots in use
        return self._slots.full.num_used
