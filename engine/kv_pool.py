"""A preallocated KV pool: per layer one K and one V tensor indexed by slot id.

Follows SGLang's MHATokenToKVPool (k_buffer/v_buffer per layer, row = one token's KV) with
the TokenToKVPoolAllocator's calls (alloc, free, free_segment, available_size), so the radix tree
owns plain int slot ids while the runner reads and writes the rows behind them. Slot 0 is a
padding row that is never handed out (SGLang does the same); padded gathers point at it.
Leaves out: paged layouts, fp8 KV, host offload (HiCache); sliding-window layers' own rows are
engine/swa_pool.py's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from radix.request import SlotAllocator

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_capacity(text: str, bytes_per_token: int) -> int:
    """Capacity in tokens from `"20000"` (tokens) or a byte size such as `"512MiB"`, `"2GB"`.

    SmolLM2 fp32 keeps 46,080 B per token, so "45MiB" = 47,185,920 B -> 1,024 tokens:
    >>> parse_capacity("45MiB", 46_080), parse_capacity("3000", 46_080)
    (1024, 3000)
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"--capacity {text!r}: use a token count (20000) or a size (512MiB, 2GB)")
    if not unit:
        return int(float(match.group(1)))
    return int(float(match.group(1)) * _UNITS[unit]) // bytes_per_token


class KVPool:
    """K/V rows for `size` tokens (slots 1..size) on every layer, plus the slot allocator.

    Bytes per token = layers x kv_heads x head_dim x 2 (K and V) x element size; SmolLM2 in fp32:
    30 x 3 x 64 x 2 x 4 = 46,080 B.
    """

    def __init__(self, size: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        if size < 1:
            raise ValueError(f"KV pool size must be >= 1 token, got {size}")
        self.size = size
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.dtype, self.device = dtype, torch.device(device)
        self._make_buffers([size + 1] * num_layers)
        self._slots = SlotAllocator(size)

    def _make_buffers(self, rows: list[int]) -> None:
        """One K and one V tensor per layer, `rows[layer]` rows each (row 0: padding)."""
        tail = (self.num_kv_heads, self.head_dim)
        try:
            self.k_buffer = [torch.zeros((n, *tail), dtype=self.dtype, device=self.device)
                             for n in rows]
            self.v_buffer = [torch.zeros((n, *tail), dtype=self.dtype, device=self.device)
                             for n in rows]
        except (RuntimeError, torch.OutOfMemoryError) as exc:  # CPU and CUDA allocators
            raise MemoryError(f"a KV pool of {self.size:,} tokens ({self.total_bytes / 2**30:,.1f}"
                              f" GiB) does not fit on {self.device}: pass a smaller --capacity"
                              ) from exc

    @classmethod
    def for_model(cls, config: Any, size: int, dtype: torch.dtype,
                  device: torch.device | str) -> KVPool:
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)
        return cls(size, config.num_hidden_layers, config.num_key_value_heads, head_dim,
                   dtype, device)

    @staticmethod
    def bytes_per_token_of(config: Any, dtype: torch.dtype) -> int:
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)
        elem = torch.empty((), dtype=dtype).element_size()
        return config.num_hidden_layers * config.num_key_value_heads * head_dim * 2 * elem

    @property
    def bytes_per_token(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * elem

    @property
    def total_bytes(self) -> int:
        return self.size * self.bytes_per_token

    # --- the Allocator protocol (radix/request.py) ---
    def alloc(self, num_tokens: int) -> list[int] | None:
        """Takes `num_tokens` slots, or returns None (nothing taken) when too few are free."""
        return self._slots.alloc(num_tokens)

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots; a double free raises ValueError. The rows keep their bytes (unused)."""
        self._slots.free(slot_ids)

    def free_segment(self, slot_ids: Sequence[int], start_pos: int = 0) -> None:
        """Frees `slot_ids[start_pos:]`: a request's own tail past its tree-owned prefix."""
        if start_pos < 0:
            raise ValueError(f"start_pos must be >= 0, got {start_pos}")
        self._slots.free(list(slot_ids[start_pos:]))

    def available_size(self) -> int:
        return self._slots.available_size()

    @property
    def num_used(self) -> int:
        return self._slots.num_used

    def check_invariants(self) -> None:
        self._slots.check_invariants()

    # --- the rows ---
    def write(self, layer: int, slot_ids: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Stores K/V of shape [n, kv_heads, head_dim] at rows `slot_ids` ([n] int64)."""
        self.k_buffer[layer][slot_ids] = k.to(self.dtype)
        self.v_buffer[layer][slot_ids] = v.to(self.dtype)

    def read(self, layer: int, slot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gathers K/V at `slot_ids` (any shape S) -> two tensors [*S, kv_heads, head_dim]."""
        # index_select on the flat ids is ~2x faster on CPU than advanced indexing with [B, L]
        flat, shape = slot_ids.reshape(-1), (*slot_ids.shape, self.num_kv_heads, self.head_dim)
        return (self.k_buffer[layer].index_select(0, flat).view(shape),
                self.v_buffer[layer].index_select(0, flat).view(shape))
