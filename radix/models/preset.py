"""A model's cache shape, read from its Hugging Face config.json: `ModelPreset`.

What the prefix caches need of a model and nothing else: the kind of every layer (full
attention, sliding window, linear attention (Gated DeltaNet), Mamba-2, or no cache at all), the
attention heads and head size, the window, the recurrent state's shapes and dtypes, the chunk
size. The config dialects read: Qwen3.5 and Qwen3-Next (`layer_types` or
`full_attention_interval`, `linear_*`, `mamba_ssm_dtype`), gpt-oss and Gemma 3 (`layer_types`,
`sliding_window`, `sliding_window_pattern`), Nemotron-H (`hybrid_override_pattern` or
`layers_block_type`, Mamba-2 fields), and any dense model (every layer full attention). A
nested `text_config` is read instead of the wrapper. Shapes and dtypes follow vLLM 0.33's state
calculators (mamba_utils.py) at tensor parallelism 1. Leaves out: MLA, chunked-local attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FULL, SLIDING, LINEAR, MAMBA, NONE = ("full_attention", "sliding_attention",
                                      "linear_attention", "mamba", "none")
LAYER_KINDS = (FULL, SLIDING, LINEAR, MAMBA, NONE)
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
               "fp8": 1, "float8_e4m3fn": 1}
FLA_CHUNK_SIZE = 64  # the GDN kernels' chunk (fla chunk.py CHUNK_SIZE), not in any config


class ConfigError(ValueError):
    """A config.json the presets cannot read; the message names the file and the field."""


@dataclass(frozen=True)
class ModelPreset:
    """One model's cache shape (see the module docstring). Bytes are per layer unless named
    otherwise; `*_per_token` sum over the layers of that kind.

    >>> from radix.models import load_preset
    >>> p = load_preset("qwen3.5-4b")
    >>> p.num_layers_of(FULL), p.num_layers_of(LINEAR), p.full_kv_bytes_per_token
    (8, 24, 32768)
    >>> p.mamba_state_bytes_per_layer, p.mamba_state_shapes
    (2146304, ((8192, 3), (32, 128, 128)))
    """

    name: str  # the preset name, or the config file's path
    architecture: str  # architectures[0]
    model_type: str
    layer_types: tuple[str, ...]  # one of LAYER_KINDS per layer
    num_kv_heads: int  # attention layers
    head_dim: int
    dtype: str  # the model's dtype: KV cache and conv state
    sliding_window: int | None  # tokens a sliding layer attends to
    mamba_state_shapes: tuple[tuple[int, ...], ...] = ()  # (conv, recurrent) per Mamba layer
    mamba_state_dtypes: tuple[str, ...] = ()
    mamba_kind: str | None = None  # "gdn" (Qwen3.5/Qwen3-Next) | "mamba2" (Nemotron-H)
    mamba_chunk_size: int | None = None  # the config's Mamba-2 chunk; None for GDN
    source: str = ""  # where the config came from
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # --- counts and bytes ----------------------------------------------------------------------
    def num_layers_of(self, kind: str) -> int:
        return sum(1 for k in self.layer_types if k == kind)

    @property
    def is_hybrid(self) -> bool:
        """More than one kind of cache (sliding window or a recurrent state beside full)."""
        return len({k for k in self.layer_types if k != NONE}) > 1

    @property
    def has_mamba(self) -> bool:
        return self.num_layers_of(LINEAR) + self.num_layers_of(MAMBA) > 0

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """K and V of one token in one attention layer: 2 x heads x head_dim x dtype."""
        return 2 * self.num_kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def full_kv_bytes_per_token(self) -> int:
        return self.kv_bytes_per_token_per_layer * self.num_layers_of(FULL)

    @property
    def swa_kv_bytes_per_token(self) -> int:
        return self.kv_bytes_per_token_per_layer * self.num_layers_of(SLIDING)

    @property
    def mamba_state_bytes_per_layer(self) -> int:
        """One request's recurrent state in one layer: conv state + SSM state."""
        total = 0
        for shape, dtype in zip(self.mamba_state_shapes, self.mamba_state_dtypes, strict=True):
            n = 1
            for d in shape:
                n *= d
            total += n * DTYPE_BYTES[dtype]
        return total

    @property
    def mamba_state_bytes(self) -> int:
        """One request's states over every Mamba / linear-attention layer."""
        return self.mamba_state_bytes_per_layer * (self.num_layers_of(LINEAR)
                                                   + self.num_layers_of(MAMBA))

    @property
    def chunk_size(self) -> int | None:
        """The recurrent kernel's chunk: the config's Mamba-2 chunk, or FLA's 64 for GDN."""
        if not self.has_mamba:
            return None
        return self.mamba_chunk_size or FLA_CHUNK_SIZE

    def summary(self) -> dict[str, Any]:
        """The numbers a reader wants, as plain data (for --json and docs)."""
        return {"name": self.name, "architecture": self.architecture,
                "layers": {k: self.num_layers_of(k) for k in LAYER_KINDS if self.num_layers_of(k)},
                "sliding_window": self.sliding_window, "dtype": self.dtype,
                "kv_bytes_per_token_per_layer": self.kv_bytes_per_token_per_layer,
                "full_kv_bytes_per_token": self.full_kv_bytes_per_token,
                "swa_kv_bytes_per_token": self.swa_kv_bytes_per_token,
                "mamba_state_shapes": [list(s) for s in self.mamba_state_shapes],
                "mamba_state_dtypes": list(self.mamba_state_dtypes),
                "mamba_state_bytes_per_layer": self.mamba_state_bytes_per_layer,
                "mamba_state_bytes": self.mamba_state_bytes, "chunk_size": self.chunk_size,
                "source": self.source}
