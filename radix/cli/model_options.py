"""`--model PRESET|config.json` and the SGLang flags that change a hybrid model's answer, for the
trace commands that run SGLang's tree (simulate).

A preset is a name of radix/models/'s PRESETS or a path to any config.json; a hybrid one
(sliding-window or Mamba layers) runs on SGLang 0.5.23's component tree, configured by SGLang's
own flag names with SGLang's defaults (on an H100 the overlap scheduler is on, so the Mamba
strategy `auto` resolves to extra_buffer). A bad name or file is an InputError naming it.
Leaves out: vLLM's options (`VllmOptions`), which the vLLM side of a command adds.
"""

from __future__ import annotations

import argparse
from typing import Any

from radix.models.config import PRESETS
from radix.tree.hybrid_args import STRATEGIES, HybridServerArgs


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="PRESET|config.json",
                        help=f"the model whose caches to run: {', '.join(PRESETS)}, or a "
                             "config.json; a hybrid one runs on SGLang's component tree "
                             "(default: full attention only)")
    g = parser.add_argument_group("SGLang 0.5.23 flags for a hybrid --model")
    g.add_argument("--mamba-radix-cache-strategy", choices=STRATEGIES, default="auto",
                   help="auto: extra_buffer with the overlap scheduler, else no_buffer")
    g.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang without its overlap scheduler (one tracking slot; auto picks "
                        "no_buffer)")
    g.add_argument("--swa-full-tokens-ratio", type=float, default=0.8,
                   help="SWA pool tokens per full pool token (default 0.8)")
    g.add_argument("--max-mamba-cache-size", type=int, default=None, metavar="SLOTS",
                   help="Mamba state slots (default: SGLang's memory split beside --capacity)")
    g.add_argument("--mamba-track-interval", type=int, default=256,
                   help="decode keeps a Mamba state this often (default 256)")


def sglang_args(args: Any) -> HybridServerArgs:
    """The flags as SGLang's server arguments; an InputError names a bad one."""
    from radix.cli import InputError

    try:
        return HybridServerArgs(
            mamba_radix_cache_strategy=args.mamba_radix_cache_strategy,
            disable_overlap_schedule=args.disable_overlap_schedule,
            swa_full_tokens_ratio=args.swa_full_tokens_ratio,
            max_mamba_cache_size=args.max_mamba_cache_size,
            mamba_track_interval=args.mamba_track_interval)
    except ValueError as exc:
        raise InputError(f"--{str(exc).split()[0].replace('_', '-')}: {exc}") from None


def check_model(args: Any) -> None:
    """Loads --model once, so a bad name or file fails before the trace runs."""
    from radix.cli import InputError
    from radix.models.config import load_preset

    if args.model is None:
        return
    try:
        load_preset(args.model)
    except ValueError as exc:
        raise InputError(f"--model {exc}") from None
    if args.max_mamba_cache_size is not None and args.max_mamba_cache_size < 1:
        raise InputError(f"--max-mamba-cache-size must be >= 1, got {args.max_mamba_cache_size}")
