"""A preset as SGLang 0.5.23 builds its tree: the `HybridShape` radix/tree/hybrid_args.py sizes
the pools (`pool_sizes`: SGLang's split of a KV memory budget) and the components from.

SGLang's sliding_window_size is the config's window less the query's own position (Gemma 3's and
gpt-oss's get_attention_sliding_window_size: sliding_window - 1). Leaves out: the unified
(shared-byte) pools, speculative decoding's extra states.
"""

from __future__ import annotations

from radix.models.preset import SLIDING, ModelPreset
from radix.tree.hybrid_args import HybridShape


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
