"""One model preset on both engines: the settings that change a hybrid model's answer
(`EngineAssumptions`, each engine's default on an H100) and the one function per engine that
maps a `ModelPreset` onto it: `for_sglang` (SGLang 0.5.23's HybridShape and HybridServerArgs,
radix/tree/hybrid_args.py) and `for_vllm` (vLLM 0.33's layout, from its VllmOptions). Pools
come from one KV memory budget, split as each engine splits it (`sglang_pools`,
`vllm_num_blocks`); `describe` says what was assumed and names the alternatives,
`engine_configs` the configurations that change the answer. Leaves out: tensor parallelism,
KV-cache quantization, speculative decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from radix.models.preset import SLIDING, ModelPreset
from radix.models.sglang import sglang_shape
from radix.models.vllm import (
    ATTENTION_BACKENDS,
    GDN_PREFILL_BACKENDS,
    VllmLayout,
    VllmOptions,
    vllm_layout,
)
from radix.tree.hybrid_args import STRATEGIES, HybridServerArgs, HybridShape, PoolSizes, pool_sizes

GIB = 1 << 30
DEFAULT_KV_MEMORY = 40 * GIB  # about what an H100 (80 GB) leaves for KV beside 8-27B weights
PREFILL_CHUNK = 8192  # SGLang's chunked_prefill_size and vLLM's max_num_batched_tokens, H100
MAMBA_CACHE_MODES = ("align", "none")


@dataclass(frozen=True)
class EngineAssumptions:
    """What the answer depends on beyond the model and the trace, by each engine's flag name,
    with the engines' defaults on an H100 (the `python -m radix` options of the same names)."""

    # vLLM 0.33
    attention_backend: str = "FLASH_ATTN"  # --attention-backend; every one takes 16-token blocks
    gdn_prefill_backend: str = "flashinfer"  # SM90 picks FlashInfer (64-token grid): block 576
    mamba_cache_mode: str = "align"  # the only prefix-caching mode; "none" turns caching off
    block_size: int | None = None  # --block-size; None: 16, raised to hold a Mamba state
    # SGLang 0.5.23
    mamba_radix_cache_strategy: str = "auto"  # auto: extra_buffer with the overlap scheduler
    disable_overlap_schedule: bool = False  # on by default: auto resolves to extra_buffer
    page_size: int = 1  # --page-size
    # both
    kv_memory_bytes: int | None = DEFAULT_KV_MEMORY  # None: room for the whole trace
    chunked_prefill_size: int = PREFILL_CHUNK  # prefill chunk, tokens

    def __post_init__(self) -> None:
        for value, known, name in (
                (self.attention_backend, ATTENTION_BACKENDS, "attention_backend"),
                (self.gdn_prefill_backend, GDN_PREFILL_BACKENDS, "gdn_prefill_backend"),
                (self.mamba_cache_mode, MAMBA_CACHE_MODES, "mamba_cache_mode"),
                (self.mamba_radix_cache_strategy, STRATEGIES, "mamba_radix_cache_strategy")):
            if value not in known:
                raise ValueError(f"{name} must be one of {', '.join(known)}, got {value!r}")
        for name in ("page_size", "chunked_prefill_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.kv_memory_bytes is not None and self.kv_memory_bytes < 1:
            raise ValueError(f"kv_memory_bytes must be >= 1, got {self.kv_memory_bytes}")


def sglang_server_args(preset: ModelPreset, a: EngineAssumptions, **more) -> HybridServerArgs:
    """SGLang's server arguments under `a`, the Mamba strategy resolved (auto: extra_buffer
    with the overlap scheduler, no_buffer without it); `more` sets any other field.

    >>> from radix.models import load_preset
    >>> q = load_preset("qwen3.5-4b")
    >>> sglang_server_args(q, EngineAssumptions()).mamba_radix_cache_strategy
    'extra_buffer'
    >>> off = EngineAssumptions(disable_overlap_schedule=True)
    >>> sglang_server_args(q, off).mamba_radix_cache_strategy
    'no_buffer'
    """
    args = HybridServerArgs(page_size=a.page_size,
                            mamba_radix_cache_strategy=a.mamba_radix_cache_strategy,
                            disable_overlap_schedule=a.disable_overlap_schedule, **more)
    return args.resolved(sglang_shape(preset))


def vllm_options(a: EngineAssumptions, max_model_len: int = 1 << 20) -> VllmOptions:
    """vLLM's settings under `a`. `max_model_len` defaults past any trace's request: the cache
    is asked, not the model's context limit.

    >>> vllm_options(EngineAssumptions(gdn_prefill_backend="triton")).gdn_prefill_backend
    'triton'
    """
    return VllmOptions(attention_backend=a.attention_backend,
                       gdn_prefill_backend=a.gdn_prefill_backend,
                       mamba_cache_mode=a.mamba_cache_mode, block_size=a.block_size,
                       max_model_len=max_model_len)


def for_sglang(preset: ModelPreset, a: EngineAssumptions | None = None, **more
               ) -> tuple[HybridShape, HybridServerArgs]:
    """The preset on SGLang: its shape and its server arguments (resolved) under `a`; `more`
    sets other HybridServerArgs fields (pool sizes). build_hybrid_cache(*for_sglang(...))
    builds the tree.

    >>> from radix.models import load_preset
    >>> shape, args = for_sglang(load_preset("gemma-3-27b"), max_total_num_tokens=1000)
    >>> shape.sliding_window, args.max_total_num_tokens
    (1023, 1000)
    """
    a = a or EngineAssumptions()
    return sglang_shape(preset), sglang_server_args(preset, a, **more)


def for_vllm(preset: ModelPreset, a: EngineAssumptions | None = None) -> VllmLayout:
    """The preset on vLLM under `a`: its layout (`.manager(num_blocks)` builds the cache).

    >>> from radix.models import load_preset
    >>> for_vllm(load_preset("qwen3.5-4b"), EngineAssumptions(gdn_prefill_backend="triton")
    ...          ).block_size
    528
    """
    return vllm_layout(preset, vllm_options(a or EngineAssumptions()))


def sglang_pools(preset: ModelPreset, a: EngineAssumptions, memory_bytes: int) -> PoolSizes:
    """SGLang's split of `memory_bytes` (hybrid_args.pool_sizes): Mamba states take
    mamba_full_memory_ratio / (1 + ratio) of it, the rest buys full tokens and their SWA share.

    40 GiB on Qwen3.5-4B: the states get 40 x 0.9 / 1.9 = 18.9 GiB, 394 states of 49.1 MiB
    (one of them the padding slot); the other 21.1 GiB buy full tokens at 32 KiB each.
    >>> from radix.models import load_preset
    >>> sglang_pools(load_preset("qwen3.5-4b"), EngineAssumptions(), 40 * GIB)
    PoolSizes(full_tokens=691352, swa_tokens=0, mamba_slots=393)
    """
    shape = sglang_shape(preset)
    return pool_sizes(shape, sglang_server_args(preset, a), memory_bytes)


def vllm_num_blocks(layout: VllmLayout, memory_bytes: int) -> int:
    """vLLM's block count for `memory_bytes` (kv_cache_planning.py): one block id holds a page in
    every layer of a group, so a block costs page bytes x the largest group's layers.

    40 GiB on Qwen3.5-4B: a page is 576 x 4,096 B = 2.25 MiB, a group 8 layers: 18 MiB a block,
    2,275 blocks.
    >>> from radix.models import load_preset
    >>> vllm_num_blocks(vllm_layout(load_preset("qwen3.5-4b")), 40 * GIB)
    2275
    """
    per_block = layout.page_size_bytes * max(len(g.layer_names) for g in layout.groups)
    return max(memory_bytes // per_block, 1)


def describe(preset: ModelPreset, a: EngineAssumptions) -> dict[str, list[str]]:
    """What each engine was assumed to run, and the alternatives that change the answer.

    >>> from radix.models import load_preset
    >>> d = describe(load_preset("qwen3.5-4b"), EngineAssumptions())
    >>> for line in d["vllm"][0].split(", "): print(line)
    block 576: attention FLASH_ATTN (16-token kernel blocks)
    GDN prefill flashinfer (checkpoints every 64 tokens)
    >>> d["sglang"][0]
    'mamba_radix_cache_strategy extra_buffer (auto, the overlap scheduler on)'
    """
    layout = vllm_layout(preset, vllm_options(a))
    vllm, sglang, others = [], [], []
    grid = GDN_PREFILL_BACKENDS[a.gdn_prefill_backend]
    gdn = (f", GDN prefill {a.gdn_prefill_backend} ("
           + (f"checkpoints every {grid} tokens)" if grid else "no checkpoint grid)")
           if preset.mamba_kind == "gdn" else "")
    vllm.append(f"block {layout.block_size}: attention {a.attention_backend} "
                f"({ATTENTION_BACKENDS[a.attention_backend]}-token kernel blocks){gdn}")
    if preset.has_mamba:
        _mamba_lines(preset, a, vllm, sglang, others)
    if preset.num_layers_of(SLIDING):
        sglang.append(f"sliding_window_size {preset.sliding_window - 1} (the config's window "
                      f"{preset.sliding_window} - 1), swa_full_tokens_ratio "
                      f"{HybridServerArgs().swa_full_tokens_ratio}")
    sglang.append(f"page {a.page_size}")
    both = [f"prefill chunks of {a.chunked_prefill_size:,} tokens",
            "KV memory " + ("unbounded (room for the whole trace)" if a.kv_memory_bytes is None
                            else f"{a.kv_memory_bytes / GIB:g} GiB")]
    others.append("--kv-memory GIB|unbounded")
    return {"vllm": vllm, "sglang": sglang, "both": both, "others": others}


def _mamba_lines(preset: ModelPreset, a: EngineAssumptions, vllm: list[str], sglang: list[str],
                 others: list[str]) -> None:
    """describe's lines for a model with Mamba layers: vLLM's cache mode and GDN backend,
    SGLang's strategy, and the other choice of each."""
    vllm.append(f"mamba_cache_mode {a.mamba_cache_mode}")
    if preset.mamba_kind == "gdn":
        other = "triton" if a.gdn_prefill_backend == "flashinfer" else "flashinfer"
        alt = vllm_layout(preset, vllm_options(EngineAssumptions(gdn_prefill_backend=other,
                                                                 block_size=a.block_size)))
        others.append(f"--gdn-prefill-backend {other} (vLLM block {alt.block_size})")
    if a.mamba_cache_mode == "align":
        others.append("--mamba-cache-mode none (vLLM: no prefix caching)")
    args = sglang_server_args(preset, a)
    s = args.mamba_radix_cache_strategy
    auto = a.mamba_radix_cache_strategy == "auto"
    how = ("auto, the overlap scheduler " + ("off" if args.disable_overlap_schedule else "on")
           if auto else "set")
    sglang.append(f"mamba_radix_cache_strategy {s} ({how})")
    flipped = "no_buffer" if s == "extra_buffer" else "extra_buffer"
    if auto:
        flip = "--disable-overlap-schedule" if s == "extra_buffer" else "the overlap scheduler"
        others.append(f"{flip} (SGLang auto: {flipped})")
    else:
        others.append(f"--mamba-radix-cache-strategy {flipped}")


def engine_configs(preset: ModelPreset, a: EngineAssumptions
                   ) -> list[tuple[str, str, EngineAssumptions]]:
    """(label, engine, assumptions) of each engine as assumed, then the alternatives that change
    its answer: vLLM's other GDN prefill backend, SGLang's other Mamba strategy.

    >>> from radix.models import load_preset
    >>> for c in engine_configs(load_preset("qwen3.5-4b"), EngineAssumptions()): print(c[0])
    vLLM block 576 (flashinfer)
    vLLM block 528 (triton)
    SGLang extra_buffer
    SGLang no_buffer
    >>> [c[0] for c in engine_configs(load_preset("gpt-oss-20b"), EngineAssumptions())]
    ['vLLM block 16', 'SGLang page 1']
    """
    def vllm(b: EngineAssumptions) -> tuple[str, str, EngineAssumptions]:
        block = vllm_layout(preset, vllm_options(b)).block_size
        gdn = f" ({b.gdn_prefill_backend})" if preset.mamba_kind == "gdn" else ""
        return f"vLLM block {block}{gdn}", "vllm", b

    def sglang(b: EngineAssumptions) -> tuple[str, str, EngineAssumptions]:
        if not preset.has_mamba:
            return f"SGLang page {b.page_size}", "sglang", b
        return f"SGLang {sglang_server_args(preset, b).mamba_radix_cache_strategy}", "sglang", b

    out = [vllm(a)]
    if preset.mamba_kind == "gdn":
        other = "triton" if a.gdn_prefill_backend == "flashinfer" else "flashinfer"
        out.append(vllm(replace(a, gdn_prefill_backend=other)))
    out.append(sglang(a))
    if preset.has_mamba:
        if sglang_server_args(preset, a).mamba_radix_cache_strategy == "extra_buffer":
            alt = replace(a, mamba_radix_cache_strategy="no_buffer",
                          disable_overlap_schedule=True)
            if a.page_size == 1:  # no_buffer takes pages of 1 only
                out.append(sglang(alt))
        else:
            out.append(sglang(replace(a, mamba_radix_cache_strategy="extra_buffer",
                                      disable_overlap_schedule=False)))
    return out
