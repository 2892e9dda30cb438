"""A cost model for the simulated engine: seconds for a prefill chunk and for a decode step.

Defaults are Llama-3-8B on one H100 (DESIGN.md), derived, not measured: 131,072 B of KV per token
(32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 B), prefill at 8,192 / 148.7 TFLOP x 400 TFLOP/s
= ~22,036 tokens/s, a decode step reading the 16.06 GB of bf16 weights plus the batch's KV at
3.35 TB/s, a host-tier load back over PCIe Gen5 x16 at 50 GB/s (of 64). Leaves out: attention's
quadratic term, kernel launch overhead, batching efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass

LABEL = "derived, not measured (Llama-3-8B on H100)"


@dataclass(frozen=True)
class CostModel:
    kv_bytes_per_token: int = 131_072  # 32 x 8 x 128 x 2 x 2 B (bf16)
    flop_per_8192_tokens: float = 148.7e12  # prefill FLOP for an 8,192-token chunk
    achieved_flops: float = 400e12  # FLOP/s an H100 sustains in prefill
    weight_bytes: float = 16.06e9  # 8.03 B parameters x 2 B
    hbm_bytes_per_s: float = 3.35e12  # H100 SXM HBM3 bandwidth
    pcie_bytes_per_s: float = 50e9  # host <-> device: PCIe Gen5 x16 (64 GB/s), ~50 achieved
    label: str = LABEL  # shown next to every number priced by this model

    def __post_init__(self) -> None:
        for name in ("kv_bytes_per_token", "flop_per_8192_tokens", "achieved_flops",
                     "weight_bytes", "hbm_bytes_per_s", "pcie_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"CostModel.{name} must be > 0, got {getattr(self, name)!r}")

    @property
    def prefill_tokens_per_s(self) -> float:
        """8,192 x 400e12 / 148.7e12 = 22,036 tokens/s with the defaults."""
        return 8192 * self.achieved_flops / self.flop_per_8192_tokens

    def prefill_seconds(self, num_tokens: int) -> float:
        """Uncached tokens / prefill rate: 2,000 tokens take 2,000 / 22,036 = 0.0908 s."""
        return num_tokens / self.prefill_tokens_per_s

    def decode_seconds(self, context_tokens: int) -> float:
        """One batched decode step: weights once, plus every running request's KV.
        An empty batch context reads 16.06 GB / 3.35 TB/s = 4.79 ms."""
        return (self.weight_bytes + context_tokens * self.kv_bytes_per_token) / self.hbm_bytes_per_s

    def load_back_seconds(self, num_tokens: int) -> float:
        """Host -> device copy of num_tokens' KV (the host tier's load back): 2,000 tokens are
        2,000 x 131,072 B = 262 MB, / 50 GB/s = 0.00524 s."""
        return num_tokens * self.kv_bytes_per_token / self.pcie_bytes_per_s

    def kv_bytes(self, num_tokens: int) -> int:
        return num_tokens * self.kv_bytes_per_token
