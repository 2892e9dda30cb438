"""`python -m radix compare TRACE`: one trace through the radix tree and the block cache.

Parses the arguments, loads the trace and prints `radix.runs.compare.compare` as a table or JSON;
with `--model` the trace runs on that model's caches in both engines instead
(`radix.runs.hybrid.compare_model`, printed by cli/model.py).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from radix.blocks.hashing import HASH_ALGOS, VLLM_NONE_HASH_SEED
from radix.cli.model_options import add_model, model_from
from radix.cli.options import (
    add_capacity,
    add_limits,
    capacity_label,
    load_request_trace,
)
from radix.runs.compare import compare
from radix.runs.recording import match_recording
from radix.traces import load_trace

# the two hit rates: over the admitted requests' prompts (what the engine's counters see), and
# over every prompt of the trace, rejected ones included; equal when nothing is rejected
ROWS = (("requests run", "requests"), ("rejected (too big)", "rejected"),
        ("prompt tokens (admitted)", "prompt_tokens"),
        ("prompt tokens (rejected)", "rejected_prompt_tokens"), ("hit tokens", "hit_tokens"),
        ("hit rate (admitted prompts)", "hit_rate"), ("hit rate (all prompts)", "hit_rate_all"),
        ("tokens prefilled", "prefilled_tokens"),
        ("evictions (nodes / blocks)", "evictions"), ("evicted tokens", "evicted_tokens"),
        ("unreachable blocks", "unreachable_blocks"))


def format_table(result: dict) -> str:
    lines = [f"{'capacity ' + capacity_label(result['capacity']):28} "
             f"{'radix tree':>14} {'block cache':>14}"]
    for label, key in ROWS:
        cells = []
        for side in ("tree", "blocks"):
            v = result[side][key]
            rate = key.startswith("hit_rate")
            cells.append("-" if v is None else f"{v:.1%}" if rate else f"{v:,}")
        lines.append(f"{label:28} {cells[0]:>14} {cells[1]:>14}")
    return "\n".join(lines)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("compare", help="one trace through the radix tree and block cache")
    p.add_argument("trace", metavar="TRACE", help="a trace file (see radix/traces/base.py)")
    add_capacity(p)
    p.add_argument("--page-size", type=int, default=1, help="the tree's page size (SGLang: 1)")
    p.add_argument("--block-size", type=int, default=16, help="the block cache's block size")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--hash", choices=HASH_ALGOS, default=None,
                   help="how blocks are hashed (hit counts do not depend on it; with "
                        "--kv-events the default is vllm-sha256, vLLM's own)")
    p.add_argument("--kv-events", metavar="RECORDING", default=None,
                   help="a vLLM KV-event recording of the same requests: how many of its "
                        "stored hashes the replay stores too, and the first that differs")
    p.add_argument("--hash-seed", default=VLLM_NONE_HASH_SEED,
                   help="the PYTHONHASHSEED vLLM ran with (default: unset, its fixed seed)")
    p.add_argument("--lora-path", action="append", default=[], metavar="NAME=PATH",
                   help="a LoRA adapter's path, which vLLM hashes with its name")
    add_limits(p)
    add_model(p)
    p.add_argument("--per-request", action="store_true",
                   help="with --model and --json: each engine's hit for every request")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = model_from(args)
    trace = load_request_trace(args, "compare")
    if model is not None:
        return run_model(args, trace, *model)
    result = compare(trace, args.capacity, args.page_size, args.block_size)
    match = None
    if args.kv_events is not None:
        paths = dict(item.split("=", 1) for item in args.lora_path if "=" in item)
        match = match_recording(trace, load_trace(args.kv_events), hash_algo=args.hash or
                                "vllm-sha256", seed=args.hash_seed, lora_paths=paths)
    if args.json:
        extra = {} if match is None else {"kv_events": asdict(match)}
        print(json.dumps({**result, "hash_algo": args.hash or "radixlens", **extra}, indent=2))
    else:
        print(format_table(result))
        if match is not None:
            print(match.summary())
    return 0


def run_model(args: argparse.Namespace, trace: Any, preset: Any, assumptions: Any) -> int:
    from radix.cli import InputError
    from radix.cli.model import format_compare
    from radix.cli.model_options import model_progress
    from radix.runs.hybrid_compare import compare_model

    if args.kv_events is not None:
        raise InputError("--kv-events: not with --model (the recording is of one full-attention "
                         "cache)")
    result = compare_model(trace, preset, assumptions, per_request=args.per_request,
                           progress=model_progress("compare", trace))
    print(json.dumps(result, indent=2) if args.json else format_compare(result))
    return 0
