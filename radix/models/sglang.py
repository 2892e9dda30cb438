"""A preset as SGLang 0.5.23 builds its tree: the `HybridShape` radix/tree/hybrid_args.py sizes
the pools and components from, and the Mamba state slots a full pool of N tokens implies.

SGLang's sliding_window_size is the config's window less the query's own position (Gemma 3's and
gpt-oss's get_attention_sliding_window_size: sliding_window - 1). Its memory split gives the
Mamba states mamba_full_memory_ratio / (1 + ratio) of the KV budget and the rest to full tokens
(`pool_sizes`); `mamba_slots_for` runs that split backwards from a full pool's tokens.
Leaves out: the unified (shared-byte) pools, speculative decoding's extra states.
"""

from __future__ import annotations

from radix.models.preset import SLIDING, ModelPreset
from radix.tree.hybrid_args import HybridServerArgs, HybridShape


def sglang_shape(preset: ModelPreset) -> HybridShape:
    """What SGLang's tree needs of `preset`: SWA with SGLang's window, Mamba with its state
    bytes and chunk.

    >>> from radix.models.config import load_preset
    >>> s = sglang_shape(load_preset("gpt-oss-20b")); s.sliding_window, s.has_mamba
    (127, False)
    >>> s = sglang_shape(load_preset("qwen3.5-4b")); s.sliding_window, s.mamba_chunk_size
    (None, 64)
    """
    sliding = preset.num_layers_of(SLIDING) > 0 and preset.sliding_window
    return HybridShape(
        sliding_window=preset.sliding_window - 1 if sliding else None,
        has_mamba=preset.has_mamba,
        full_kv_bytes_per_token=preset.full_kv_bytes_per_token,
        swa_kv_bytes_per_token=preset.swa_kv_bytes_per_token,
        mamba_state_bytes=preset.mamba_state_bytes,
        mamba_chunk_size=preset.chunk_size or 64)


def mamba_slots_for(shape: HybridShape, args: HybridServerArgs, full_tokens: int) -> int:
    """The Mamba state slots SGLang's memory split gives beside a full pool of `full_tokens`:
    the full pool's bytes are the 1 / (1 + ratio) share, the states' ratio / (1 + ratio), one
    padding slot aside.

    Qwen3.5-4B (32,768 B a token, 51,511,296 B a state, ratio 0.9), 100,000 tokens:
    3,276,800,000 x 0.9 / 51,511,296 = 57.3, less the padding slot: 56.
    >>> from radix.models.config import load_preset
    >>> mamba_slots_for(sglang_shape(load_preset("qwen3.5-4b")), HybridServerArgs(), 100_000)
    56
    """
    ratio = args.swa_full_tokens_ratio if shape.sliding_window else 0
    full_bytes = full_tokens * (shape.full_kv_bytes_per_token
                                + ratio * shape.swa_kv_bytes_per_token)
    per = shape.mamba_state_bytes
    return max(0, int((full_bytes * args.mamba_full_memory_ratio - per) // per))
