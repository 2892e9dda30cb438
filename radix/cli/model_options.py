"""`simulate --model PRESET|config.json`: a hybrid model's SGLang tree through the scheduler, its
pools split from `--kv-memory` GiB as SGLang splits them, with SGLang's flags that change the
answer (defaults: an H100's, where the overlap scheduler is on and `auto` picks extra_buffer).

The names and rules follow the shared `--model` options of the other trace commands (`--model`,
`--kv-memory` replacing `--capacity`, a bad preset one InputError), so the two can be one.
Leaves out: vLLM's options (simulate runs no vLLM hybrid cache).
"""

from __future__ import annotations

import argparse
from typing import Any

from radix.cli.options import UNBOUNDED
from radix.models.config import PRESETS
from radix.tree.hybrid_args import STRATEGIES

DEFAULT_KV_MEMORY = 40 << 30  # about what an H100 (80 GB) leaves for KV beside 8-27B weights


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


def add_model_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("hybrid models (with --model)")
    g.add_argument("--model", metavar="PRESET|config.json", default=None,
                   help=f"a model preset ({', '.join(PRESETS)}) or a config.json: a hybrid one "
                        "runs on SGLang's component tree (docs/HYBRID.md, The scheduler)")
    g.add_argument("--kv-memory", type=parse_kv_memory, default=DEFAULT_KV_MEMORY,
                   metavar="GIB|unbounded",
                   help=f"KV cache memory, split as SGLang splits it (default "
                        f"{DEFAULT_KV_MEMORY >> 30}; '{UNBOUNDED}': room for the whole trace). "
                        "Replaces --capacity")
    g.add_argument("--mamba-radix-cache-strategy", choices=STRATEGIES, default="auto",
                   help="SGLang's Mamba strategy (auto: extra_buffer with the overlap "
                        "scheduler, no_buffer without)")
    g.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang without the overlap scheduler (auto then picks no_buffer)")


def model_config(args: Any) -> dict[str, Any]:
    """SimConfig's fields for --model (none without it); an InputError names a bad preset or
    flag, --capacity beside --model, or a --model flag without --model."""
    from radix.cli import InputError
    from radix.models.config import load_preset
    from radix.models.sglang import sglang_shape
    from radix.tree.hybrid_args import HybridServerArgs

    if args.model is None:
        given = [f for f, on in (("--kv-memory", args.kv_memory != DEFAULT_KV_MEMORY),
                                 ("--mamba-radix-cache-strategy",
                                  args.mamba_radix_cache_strategy != "auto"),
                                 ("--disable-overlap-schedule", args.disable_overlap_schedule))
                 if on]
        if given:
            raise InputError(f"{', '.join(given)}: only with --model")
        return {}
    try:
        preset = load_preset(args.model)
    except ValueError as exc:
        raise InputError(f"--model {exc}") from None
    if args.capacity is not None:
        raise InputError("--capacity counts the tokens of one full-attention cache; with "
                         "--model give --kv-memory GIB (SGLang splits it among its pools)")
    try:
        sglang = HybridServerArgs(mamba_radix_cache_strategy=args.mamba_radix_cache_strategy,
                                  disable_overlap_schedule=args.disable_overlap_schedule,
                                  page_size=args.page_size)
        sglang.resolved(sglang_shape(preset))  # no_buffer with pages > 1 and such: said now
    except ValueError as exc:
        raise InputError(f"--model {args.model}: {exc}") from None
    return {"model": args.model, "kv_memory": args.kv_memory, "sglang": sglang}
