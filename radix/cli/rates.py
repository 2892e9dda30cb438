"""`python -m radix rates TRACE`: the hit rates vLLM's and SGLang's own logs would show for a
trace, beside RadixLens's, and why the three differ.

Runs `radix.runs.counters.engine_rates` (one simulator run, the block shadow counting as vLLM's
PrefixCacheStats/CachingMetrics, the prefill batches as SGLang's metrics reporter). `--json`
prints every step's and batch's figures. Leaves out: a watched server (its KV events carry no
lookups, so neither engine's counters can be rebuilt from them).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from radix.runs.counters import EngineRates, engine_rates
from radix.runs.sim import SimConfig
from radix.sched.policy import POLICIES
from radix.traces import TraceError, load_trace


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("rates", help="vLLM's and SGLang's logged hit rates for a trace")
    p.add_argument("trace", help="a request or Mooncake trace")
    p.add_argument("--capacity", type=int, default=None, help="KV pool, tokens (default: no limit)")
    p.add_argument("--policy", choices=POLICIES, default="fcfs")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--budget", type=int, default=16384, help="max_prefill_tokens per round")
    p.add_argument("--chunk", type=int, default=None, help="chunked_prefill_size (default: off)")
    p.add_argument("--window", type=int, default=1000,
                   help="vLLM's max_recent_requests (CachingMetrics; default 1000)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.window < 1:
        raise ValueError(f"--window must be >= 1, got {args.window}")
    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        raise ValueError(f"{args.trace}: {exc}") from None
    if trace.format not in ("request", "mooncake"):
        raise ValueError(f"{args.trace}: rates needs a request or Mooncake trace, "
                         f"got a {trace.format} trace")
    cfg = SimConfig(policy=args.policy, block_size=args.block_size, capacity=args.capacity,
                    max_prefill_tokens=args.budget, chunked_prefill_size=args.chunk)
    r = engine_rates(trace, cfg, args.window)
    print(json.dumps(r._asdict(), indent=1, default=list) if args.json else format_rates(r, args))
    return 0


def _only_re(r: EngineRates) -> str:
    last = r.sglang_batches[-1] if r.sglang_batches else None
    if last is None or last.new_tokens + last.cached_tokens == 0:
        return ""
    if last.new_tokens - last.reprocessed_new + last.cached_tokens - last.reprocessed_cached:
        return ""
    return " (that batch held only re-admissions after retraction: SGLang logs 0)"


def format_rates(r: EngineRates, args: argparse.Namespace) -> str:
    pre_q = sum(s.preempted_queries for s in r.vllm_steps)
    pre_h = sum(s.preempted_hits for s in r.vllm_steps)
    queries = sum(s.queries for s in r.vllm_steps)
    reproc = sum(b.reprocessed_cached for b in r.sglang_batches)
    lines = [
        f"RadixLens, whole trace ({r.prompt_tokens:,} prompt tokens, first admissions): "
        f"tree {r.tree_hit_rate:.1%}, blocks of {args.block_size} {r.block_hit_rate:.1%}",
        f"vLLM's log, \"Prefix cache hit rate\" (last {args.window:,} requests, token-weighted):"
        f" {r.vllm_logged:.1%}; lifetime counters {r.vllm_lifetime:.1%} of {queries:,} queried"
        f" tokens",
        f"SGLang's cache_hit_rate (last prefill batch): {r.sglang_last_batch:.1%}{_only_re(r)};"
        f" all {len(r.sglang_batches):,} batches: {r.sglang_overall:.1%}",
        "why they differ:",
        *([f"  - {r.rejected:,} requests were never admitted (too big for the pool): in our "
           "denominator, in neither engine's counters"] if r.rejected else []),
        "  - vLLM's queries are the tokens at each lookup, its hits whole blocks only; its log "
        "covers the recent window, not the whole run",
        "  - SGLang's gauge is its latest prefill batch alone; a chunked request's cached prefix "
        "counts in its first chunk's batch only",
        f"  - re-admissions after preemption/retraction are left out of both logged rates: vLLM "
        f"preempted_queries {pre_q:,}, preempted_hits {pre_h:,}; SGLang reprocessed cached "
        f"tokens {reproc:,}",
    ]
    return "\n".join(lines)
