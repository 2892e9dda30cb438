"""What vLLM 0.33 builds from a model preset before its block cache starts: the attention block,
the Mamba block, the KV-cache groups and the hash and scheduler blocks.

The attention block follows the platform's `_align_hybrid_block_size` (platforms/interface.py):
a hybrid model's attention page (block x one layer's KV per token) must hold one Mamba state,
so the block is the smallest multiple of the kernel alignment that does: the attention backend's
smallest kernel block (16 on an H100), times, in "align" mode, the prefill kernel's checkpoint
grid (FlashInfer GDN: 64; Triton GDN: none; Mamba-2 exports any position). Qwen3.5-4B: one
layer's state is 2,146,304 B, a token's KV 4,096 B: 64 x ceil(2,146,304 / 262,144) = 576 with
FlashInfer, 16 x ceil(2,146,304 / 65,536) = 528 on the Triton path. Groups follow
`_get_kv_cache_groups_uniform_page_size` (kv_cache_planning.py): layers bucketed by spec in
layer order, split into groups of the smallest bucket's size. Leaves out: block-outermost
packed layouts, KV-cache quantization, tensor/context parallelism, draft models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from radix.blocks.hybrid_specs import (
    FullAttentionSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
    resolve_block_sizes,
)
from radix.models.preset import FULL, LINEAR, MAMBA, NONE, SLIDING, ModelPreset

# The smallest kernel block each attention backend takes on an H100
# (get_supported_kernel_block_sizes)
ATTENTION_BACKENDS = {"FLASH_ATTN": 16, "FLASHINFER": 16, "TRITON_ATTN": 16}
# GDN prefill backends and the checkpoint grid they export mid-chunk states on (gdn_attn.py)
GDN_PREFILL_BACKENDS = {"flashinfer": 64, "triton": None}
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE


@dataclass(frozen=True)
class VllmOptions:
    """The settings that change the answer, with vLLM 0.33's defaults on an H100."""

    attention_backend: str = "FLASH_ATTN"  # FlashAttention 3 on Hopper
    gdn_prefill_backend: str = "flashinfer"  # SM90 picks FlashInfer; "triton" elsewhere
    mamba_cache_mode: str = "align"  # "align": prefix caching on; "none": off (vLLM forces it)
    enable_prefix_caching: bool = True
    block_size: int | None = None  # --block-size; None: 16, raised for a hybrid model
    prefix_match_unit: int | None = None  # hash every N tokens (fine-grained hits)
    prefix_cache_retention_interval: int | None = 0  # 0: only the states a hit can resume at
    max_model_len: int = 32768  # the Mamba block in "none" mode

    def __post_init__(self) -> None:
        for value, known, name in ((self.attention_backend, ATTENTION_BACKENDS,
                                    "attention_backend"),
                                   (self.gdn_prefill_backend, GDN_PREFILL_BACKENDS,
                                    "gdn_prefill_backend"),
                                   (self.mamba_cache_mode, ("align", "none"),
                                    "mamba_cache_mode")):
            if value not in known:
                raise ValueError(f"{name} must be one of {', '.join(known)}, got {value!r}")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")


@dataclass(frozen=True)
class VllmLayout:
    """One model's KV cache in vLLM 0.33 (see the module docstring)."""

    preset: str
    groups: tuple[KVCacheGroupSpec, ...]  # group i: its layers and its spec
    block_size: int  # attention tokens per block (cache_config.block_size)
    mamba_block_size: int | None  # tokens per Mamba state block
    scheduler_block_size: int  # LCM of the groups' blocks
    hash_block_size: int  # tokens per block hash (prefix_match_unit, else the GCD)
    enable_caching: bool
    checkpoint_alignment: int | None  # the grid the prefill kernel exports Mamba states on
    attn_bytes_per_token: int  # one attention layer
    mamba_state_bytes: int  # one Mamba layer's state, unpadded
    page_size_bytes: int  # one block of one layer, every group (Mamba padded to it)
    options: VllmOptions

    def manager(self, num_blocks: int, **kwargs):
        """vLLM's KVCacheManager over this layout (radix/blocks/kv_cache_manager.py)."""
        from radix.blocks.kv_cache_manager import KVCacheManager

        opts = self.options
        return KVCacheManager(self.groups, num_blocks, max_model_len=opts.max_model_len,
                              enable_caching=self.enable_caching,
                              prefix_cache_retention_interval=opts.prefix_cache_retention_interval,
                              prefix_match_unit=opts.prefix_match_unit, **kwargs)

    def describe(self) -> list[str]:
        """One line per group: kind, block, layers."""
        return [f"group {i}: {g.kv_cache_spec.kind}, block {g.kv_cache_spec.block_size}, "
                f"{len(g.layer_names)} layers" for i, g in enumerate(self.groups)]


def vllm_layout(preset: ModelPreset, options: VllmOptions | None = None) -> VllmLayout:
    """The layout vLLM 0.33 builds for `preset` under `options` (defaults: an H100).

    >>> from radix.models import load_preset
    >>> vllm_layout(load_preset("qwen3.5-4b")).block_size
    576
    >>> vllm_layout(load_preset("qwen3.5-4b"), VllmOptions(gdn_prefill_backend="triton")).block_size
    528
    """
    opts = options or VllmOptions()
    # vLLM turns Mamba caching off with prefix caching ("none"), and prefix caching off with it
    caching = opts.enable_prefix_caching and (not preset.has_mamba
                                              or opts.mamba_cache_mode == "align")
    align = caching and preset.has_mamba
    kernel_min = ATTENTION_BACKENDS[opts.attention_backend]
    block = opts.block_size or DEFAULT_BLOCK_SIZE
    attn = preset.kv_bytes_per_token_per_layer
    state = preset.mamba_state_bytes_per_layer
    alignment = None  # the layers' checkpoint alignment (vLLM: None unless every layer has one)
    if preset.mamba_kind == "gdn" and align:
        alignment = GDN_PREFILL_BACKENDS[opts.gdn_prefill_backend]
    mamba_block = None
    if preset.has_mamba:
        kernel = max(kernel_min, block)
        if align:
            kernel = math.lcm(kernel, alignment or 1)
        needed = kernel * -(-state // (kernel * attn))
        needed = kernel_min * -(-needed // kernel_min)
        block = max(block, needed)
        mamba_block = block if align else opts.max_model_len
    page = block * attn
    specs: dict[str, KVCacheSpec] = {
        FULL: FullAttentionSpec(block, page),
        SLIDING: SlidingWindowSpec(block, preset.sliding_window or 1, page)}
    grid = None
    if preset.has_mamba:
        if preset.mamba_kind == "mamba2":
            grid = 1  # Mamba-2 exports the state at any position (mamba_mixer2.py)
        elif alignment is not None:
            grid = (math.lcm(opts.prefix_match_unit, alignment) if opts.prefix_match_unit
                    else mamba_block)
        mode = "align" if align else "none"
        specs[LINEAR] = specs[MAMBA] = MambaSpec(mamba_block, mode, int(grid is not None), grid,
                                                 page)
    groups = _groups([(f"layers.{i}", specs[k]) for i, k in enumerate(preset.layer_types)
                      if k != NONE])
    scheduler, hash_bs = resolve_block_sizes([g.kv_cache_spec for g in groups], caching,
                                             opts.prefix_match_unit)
    return VllmLayout(preset.name, groups, block, mamba_block, scheduler, hash_bs, caching,
                      grid if align else None, attn, state, page, opts)


def _groups(layers: list[tuple[str, KVCacheSpec]]) -> tuple[KVCacheGroupSpec, ...]:
    """vLLM's grouping: one group if every layer has one spec; else buckets of equal specs in
    layer order, split into groups of the smallest bucket's size (the largest when within 1.5x),
    layers dealt round-robin (layers[i::n])."""
    buckets: dict[KVCacheSpec, list[str]] = {}
    for name, spec in layers:
        buckets.setdefault(spec, []).append(name)
    if len(buckets) == 1:
        spec, names = next(iter(buckets.items()))
        return (KVCacheGroupSpec(tuple(names), spec),)
    sizes = [len(names) for names in buckets.values()]
    size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups = []
    for spec, names in buckets.items():
        n = -(-len(names) // size)
        groups.extend(KVCacheGroupSpec(tuple(names[i::n]), spec) for i in range(n))
    return tuple(groups)
