"""`python -m radix simulate TRACE` and `python -m radix configs TRACE`: the simulated engine.

`simulate` replays a trace through the scheduler, the radix tree and vLLM's block cache, priced
by the Llama-3-8B/H100 cost model (derived); `configs` runs DESIGN.md's four configurations side
by side (real tokens; `--host-ratio`: the host tier's split, cli/hosttier.py). `--model PRESET`
(cli/model_options.py): `simulate` runs the preset's SGLang component tree through the
scheduler; `configs` runs it on both engines once per configuration that changes the answer
(radix/runs/hybrid_compare.py). Leaves out: per-step traces (use the engine's event log).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from radix.cli import hosttier
from radix.cli.model_options import add_model, add_model_options, model_config, model_from
from radix.cli.options import (
    add_capacity,
    add_limits,
    capacity_label,
    load_request_trace,
    parse_jobs,
    shown,
)
from radix.runs.sim import CONFIGS, SimConfig, build, hybrid_summary, simulate_many
from radix.runs.sim import run as run_sim
from radix.sched.policy import POLICIES

ROWS = (  # (totals key, label, format)
    ("rejected", "rejected (too big)", "{:,}"),
    # hit rates over the admitted requests' prompts, then over every prompt (rejected too)
    ("hit_rate", "hit rate tree (admitted)", "{:.1%}"),
    ("hit_rate_all", "hit rate tree (all)", "{:.1%}"),
    ("block_hit_rate", "hit rate blocks (admitted)", "{:.1%}"),
    ("block_hit_rate_all", "hit rate blocks (all)", "{:.1%}"),
    ("prefilled_tokens", "tokens prefilled", "{:,}"),
    ("prefill_seconds", "prefill s (derived)", "{:.2f}"),
    ("ttft_mean_s", "TTFT mean s", "{:.3f}"),
    ("ttft_p99_s", "TTFT p99 s", "{:.3f}"),
    ("evicted_tokens", "evicted tokens", "{:,}"),
    ("retractions", "retractions", "{:,}"),
    ("unreachable_blocks", "unreachable blocks", "{:,}"),
    ("fallbacks", "LPM fallbacks", "{:,}"),
)


def register(subparsers: Any) -> None:
    sim = subparsers.add_parser("simulate", help="replay a trace through the simulated engine")
    _common(sim)
    sim.add_argument("--policy", choices=POLICIES, default="lpm")
    sim.add_argument("--eviction", default="lru", help="lru, mru, fifo, filo, lfu, priority, slru")
    sim.add_argument("--page-size", type=int, default=1)
    sim.add_argument("--no-cache", action="store_true", help="every match empty (the control)")
    hosttier.add_options(sim)
    add_model_options(sim)
    sim.set_defaults(func=run_simulate)
    cfg = subparsers.add_parser("configs", help="the four configurations of DESIGN.md")
    _common(cfg)
    # one process per configuration: on fewer cores the OS shares them out, which ends no
    # later than handing them to one worker per core in order (on the conversation stand-in,
    # 2 cores: 17 s against 19-20 s)
    cfg.add_argument("--jobs", type=parse_jobs, default=len(CONFIGS),
                     help="worker processes (default: one per configuration; 1: in this one)")
    hosttier.add_options(cfg)
    add_model(cfg)
    cfg.set_defaults(func=run_configs)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a request or Mooncake trace")
    add_capacity(p)
    add_limits(p)
    p.add_argument("--budget", type=int, default=16384, help="max_prefill_tokens per round")
    p.add_argument("--chunk", type=int, default=None, help="chunked_prefill_size (default: off)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _config(args: argparse.Namespace, **overrides: Any):
    return SimConfig(capacity=args.capacity, max_prefill_tokens=args.budget,
                     chunked_prefill_size=args.chunk, **overrides)


def run_simulate(args: argparse.Namespace) -> int:
    model = model_config(args)
    if args.host_ratio and model:
        from radix.cli import InputError

        raise InputError("--host-ratio: not with --model (the host tier holds full-attention KV)")
    trace = load_request_trace(args, "simulate")
    if args.host_ratio:
        return hosttier.run(args, trace)
    sim = build(trace, _config(args, policy=args.policy, eviction=args.eviction,
                               page_size=args.page_size, disable_cache=args.no_cache, **model))
    result, hybrid = run_sim(sim), hybrid_summary(sim)
    if args.json:
        print(json.dumps({"totals": result.totals, "notices": result.notices,
                          "rejected": result.rejected, **({"hybrid": hybrid} if hybrid else {}),
                          "requests": [r._asdict() for r in result.rows]}, indent=1))
        return 0
    if hybrid:
        print(_hybrid_line(hybrid))
    for notice in result.notices[:3]:
        print(f"NOTICE: {shown(notice, 1_000)}")
    for reason in result.rejected[:3]:
        print(f"REJECTED: {shown(reason, 1_000)}")
    if len(result.rejected) > 3:
        print(f"REJECTED: ... {len(result.rejected) - 3:,} more")
    print(f"{'rid':<16}{'ttft s':>10}{'input':>10}{'matched':>10}{'prefilled':>11}")
    for r in result.rows[:40]:
        print(f"{shown(r.rid):<16}{r.ttft:>10.3f}{r.input_tokens:>10,}{r.matched_tokens:>10,}"
              f"{r.prefilled_tokens:>11,}")
    if len(result.rows) > 40:
        print(f"... {len(result.rows) - 40:,} more requests (--json for all)")
    print(_table([("this run", result.totals)]))
    memory = args.kv_memory
    pools = (f"capacity {capacity_label(args.capacity)}" if not hybrid else
             f"KV memory {capacity_label(None) if memory is None else f'{memory / 2**30:g} GiB'}")
    print(f"{pools}; seconds are {result.totals['cost_label']}")
    return 0


def _hybrid_line(h: dict[str, Any]) -> str:
    """What the component tree was: its components and pools, in one line."""
    parts = [f"model {h['model']}: SGLang 0.5.23 component tree {'+'.join(h['components'])}",
             f"full pool {h['full_pool']:,} tokens"]
    if "swa_pool" in h:
        parts.append(f"SWA pool {h['swa_pool']:,} (window {h['sliding_window_size']:,}, freed "
                     f"every {h['swa_eviction_interval']})")
    if "mamba_state_slots" in h:
        parts.append(f"{h['mamba_state_slots']:,} Mamba state slots ({h['mamba_strategy']}, "
                     f"at most {h['max_running_requests']:,} running)")
    return "; ".join(parts) + "; no block cache beside it"


def run_configs(args: argparse.Namespace) -> int:
    model = model_from(args)
    trace = load_request_trace(args, "configs")
    if model is not None:
        return run_model_configs(args, trace, *model)
    configs = [(name, _config(args, **over)) for name, over in CONFIGS]
    tiers = hosttier.config_tiers(args, trace, CONFIGS) if args.host_ratio else None
    results = [(name, r.totals) for name, r in simulate_many(trace, configs, args.jobs)]
    if args.json:
        print(json.dumps(dict(results) if tiers is None else {**dict(results), "host_tier": tiers},
                         indent=1))
        return 0
    print(_table(results))
    if tiers is not None:
        print(hosttier.config_tier_table(tiers))
    print(f"capacity {capacity_label(args.capacity)}; budget {args.budget:,}; seconds are "
          f"{results[0][1]['cost_label']}")
    return 0


def _table(results: list[tuple[str, dict[str, Any]]]) -> str:
    """Metrics down, configurations across."""
    width = max(16, *(len(name) + 2 for name, _ in results))
    lines = [f"{'':<28}" + "".join(f"{name:>{width}}" for name, _ in results)]
    for key, label, fmt in ROWS:
        cells = [fmt.format(t[key]) if key in t else "-" for _, t in results]
        lines.append(f"{label:<28}" + "".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def run_model_configs(args: argparse.Namespace, trace: Any, preset: Any, a: Any) -> int:
    from radix.cli import InputError
    from radix.cli.model import format_configs
    from radix.cli.model_options import model_progress
    from radix.models.engines import describe
    from radix.runs.hybrid_compare import run_configs as run_hybrid_configs

    if args.host_ratio:
        raise InputError("--host-ratio: not with --model (the host tier holds full-attention KV)")
    results = run_hybrid_configs(trace, preset, a, args.jobs, model_progress("configs", trace))
    if args.json:
        print(json.dumps({"model": preset.name, "assumptions": describe(preset, a),
                          "configs": dict(results)}, indent=1))
    else:
        print(format_configs(preset.name, results, describe(preset, a)))
    return 0
