"""`--model PRESET|config.json`, one option for every trace command: the trace on a hybrid
model's caches, the pools from `--kv-memory` GiB (replacing `--capacity`), and the engines'
flags that change the answer, by their names, defaulting to an H100's (radix/models/engines.py).
`add_model(parser)` gives compare, configs, explain and why both engines' flags; simulate, which
runs SGLang's tree alone, takes SGLang's (`add_model_options`, `model_config`). `model_from`
reads them, refusing a bad preset, `--capacity` beside `--model` or a model flag without it.
Leaves out: the runs (radix/runs/hybrid*.py, radix/runs/sim.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from radix.cli.options import UNBOUNDED, StderrProgress
from radix.models.config import PRESETS
from radix.models.engines import DEFAULT_KV_MEMORY, MAMBA_CACHE_MODES, EngineAssumptions
from radix.models.vllm import ATTENTION_BACKENDS, GDN_PREFILL_BACKENDS
from radix.tree.hybrid_args import STRATEGIES

LONG_RUN = 2000  # requests: a --model run of about a minute or more says where it is
VLLM_FLAGS = ("attention_backend", "gdn_prefill_backend", "mamba_cache_mode")
SGLANG_FLAGS = ("mamba_radix_cache_strategy", "disable_overlap_schedule")


def parse_kv_memory(text: str) -> int | None:
    """`--kv-memory`'s value in bytes: GiB (a number > 0), or None for unbounded.

    >>> parse_kv_memory("40"), parse_kv_memory("0.5"), parse_kv_memory("unbounded")
    (42949672960, 536870912, None)
    """
    if text.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(text.replace(",", "").lower().removesuffix("gib"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--kv-memory must be GiB (a number > 0) or '{UNBOUNDED}', got {text!r}") from None
    if not 0 < value <= 1 << 20:
        raise argparse.ArgumentTypeError(f"--kv-memory must be > 0 and at most 1,048,576 GiB, "
                                         f"got {text!r}")
    return int(value * (1 << 30))


def add_model(parser: argparse.ArgumentParser, vllm: bool = True) -> None:
    """--model, --kv-memory and the engines' flags (SGLang's only with vllm=False)."""
    g = parser.add_argument_group("hybrid models (with --model)")
    if vllm:
        what = ("a Hugging Face config.json: run the trace on both engines' caches for that "
                "model (SGLang's component tree, vLLM's hybrid block cache; see docs/HYBRID.md)")
        split = "GPU memory for the KV cache, each engine splitting it its own way"
    else:
        what = ("a config.json: a hybrid one runs on SGLang's component tree (docs/HYBRID.md, "
                "The scheduler)")
        split = "KV cache memory, split as SGLang splits it"
    g.add_argument("--model", metavar="PRESET|config.json", default=None,
                   help=f"a model preset ({', '.join(PRESETS)}) or {what}")
    g.add_argument("--kv-memory", type=parse_kv_memory, default=DEFAULT_KV_MEMORY,
                   metavar="GIB|unbounded",
                   help=f"{split} (default {DEFAULT_KV_MEMORY >> 30}; '{UNBOUNDED}': room for "
                        "the whole trace). Replaces --capacity")
    if vllm:
        g.add_argument("--attention-backend", choices=tuple(ATTENTION_BACKENDS),
                       default="FLASH_ATTN", help="vLLM's attention backend (default FLASH_ATTN)")
        g.add_argument("--gdn-prefill-backend", choices=tuple(GDN_PREFILL_BACKENDS),
                       default="flashinfer", help="vLLM's GDN prefill kernel: flashinfer (H100, "
                       "block 576 for Qwen3.5) or triton (block 528)")
        g.add_argument("--mamba-cache-mode", choices=MAMBA_CACHE_MODES, default="align",
                       help="vLLM's mamba_cache_mode (none: no prefix caching)")
    g.add_argument("--mamba-radix-cache-strategy", choices=STRATEGIES, default="auto",
                   help="SGLang's Mamba strategy (auto: extra_buffer with the overlap "
                        "scheduler, no_buffer without)")
    g.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang without the overlap scheduler (auto then picks no_buffer)")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """simulate's --model options: SGLang's flags (it runs no vLLM hybrid cache)."""
    add_model(parser, vllm=False)


def model_from(args: Any, split: str = "each engine splits it its own way"
               ) -> tuple[Any, EngineAssumptions] | None:
    """(ModelPreset, EngineAssumptions) when the command was given --model, else None; a bad
    preset or config, --capacity beside --model, or a model flag without it is an InputError."""
    from radix.cli import InputError
    from radix.models import ConfigError, load_preset
    from radix.models.engines import sglang_server_args

    d = EngineAssumptions()
    if getattr(args, "model", None) is None:
        defaults = {"kv_memory": d.kv_memory_bytes} | {
            k: getattr(d, k) for k in (*SGLANG_FLAGS, *VLLM_FLAGS)}
        given = [f"--{k.replace('_', '-')}" for k, v in defaults.items()
                 if getattr(args, k, v) != v]
        if given:
            raise InputError(f"{', '.join(given)}: only with --model")
        return None
    try:
        preset = load_preset(args.model)
    except ConfigError as exc:
        raise InputError(f"--model {exc}") from None
    if getattr(args, "capacity", None) is not None:
        raise InputError("--capacity counts the tokens of one full-attention cache; with "
                         f"--model give --kv-memory GIB ({split})")
    block, chunk = getattr(args, "block_size", None), getattr(args, "chunk", None)
    flags = {k: getattr(args, k, getattr(d, k)) for k in (*SGLANG_FLAGS, *VLLM_FLAGS)}
    try:
        a = EngineAssumptions(**flags, block_size=None if block in (None, 16) else block,
                              page_size=getattr(args, "page_size", None) or 1,
                              kv_memory_bytes=args.kv_memory,
                              **({"chunked_prefill_size": chunk} if chunk else {}))
        sglang_server_args(preset, a)  # no_buffer with pages > 1 and such: said now
    except ValueError as exc:
        raise InputError(f"--model {args.model}: {exc}") from None
    return preset, a


def model_config(args: Any) -> dict[str, Any]:
    """simulate's SimConfig fields for --model (none without it), read by model_from."""
    from radix.tree.hybrid_args import HybridServerArgs

    model = model_from(args, "SGLang splits it among its pools")
    if model is None:
        return {}
    _, a = model
    sglang = HybridServerArgs(mamba_radix_cache_strategy=a.mamba_radix_cache_strategy,
                              disable_overlap_schedule=a.disable_overlap_schedule,
                              page_size=a.page_size)
    return {"model": args.model, "kv_memory": a.kv_memory_bytes, "sglang": sglang}


def model_progress(command: str, trace: Any, quiet: bool = False) -> Any:
    """A StderrProgress for a --model run over a long trace (LONG_RUN requests or more)."""
    if quiet or len(trace.requests) < LONG_RUN:
        return None
    return StderrProgress(command)
