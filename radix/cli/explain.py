"""`python -m radix explain TRACE`: why the trace's hit rate is what it is, tree and blocks.

Runs `radix.runs.explain.explain` (a watched simulator run, then the what-ifs) and prints the
buckets side by side, the prefixes that saved the most, the requests that lost the most, and
the what-if tables; `--json` prints everything, every request's buckets included. `--memory
MB` is a budget as the app's (radix/runs/memory.py): the what-ifs run in as many worker
processes as it holds, and a trace that does not fit one process is refused before it runs.
Rids are printed with what is not printable escaped.
`--host-ratio 2,4` adds the host tier (HiCache): each request's prompt split into device hit /
host hit (loaded back) / miss, and why each host hit was on the host (cli/hosttier.py).
`--model PRESET` explains the trace on that model's caches in both engines instead
(radix/runs/hybrid_explain.py: the hybrid buckets and what decided each request; the what-ifs
are the other engine configurations). Leaves out: charts (the app draws them from the same data).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from radix.cli import InputError, hosttier
from radix.cli.model_options import add_model, model_from
from radix.cli.options import (
    StderrProgress,
    add_capacity,
    add_limits,
    capacity_label,
    load_request_trace,
    parse_jobs,
    shown,
)
from radix.runs import memory
from radix.runs.explain import BUCKETS, Explanation, explain
from radix.runs.probe import PrefixSaved
from radix.runs.sim import SimConfig
from radix.sched.policy import POLICIES
from radix.traces.hashview import block_span
from radix.traces.mooncake import BLOCK_TOKENS

LABELS = {"hit": "hit", "evicted": "evicted (capacity)", "last_token_cap": "last-token cap",
          "block_rounding": "block rounding", "in_flight": "in flight",
          "block_floor": "block floor (< 1 block)",
          "other_namespace": "other namespace", "first_seen": "first seen (compulsory)",
          "rejected": "rejected (too big)"}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("explain", help="why the hit rate is what it is (both caches)")
    p.add_argument("trace", help="a request or Mooncake trace")
    add_capacity(p)
    add_limits(p)
    p.add_argument("--policy", choices=POLICIES, default="lpm")
    p.add_argument("--eviction", default="lru", help="lru, mru, fifo, filo, lfu, priority, slru")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--budget", type=int, default=16384, help="max_prefill_tokens per round")
    p.add_argument("--chunk", type=int, default=None, help="chunked_prefill_size (default: off)")
    p.add_argument("--capacities", type=int, default=8, help="points on the capacity curve")
    p.add_argument("--no-what-if", action="store_true", help="skip the what-if runs")
    p.add_argument("--jobs", type=parse_jobs, default=os.cpu_count() or 1,
                   help="worker processes for the what-if runs (default: one per CPU; "
                        "1: in this one)")
    p.add_argument("--memory", type=parse_jobs, default=memory.DEFAULT_BUDGET_MB, metavar="MB",
                   help="memory budget of every process together, MiB (default "
                        f"{memory.DEFAULT_BUDGET_MB:,}: the app's, RADIXLENS_PROCESS_MB); "
                        "--jobs is lowered to fit it")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--top", type=int, default=10, help="prefixes and requests to list")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    hosttier.add_options(p)
    add_model(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = model_from(args)
    trace = load_request_trace(args, "explain")
    if model is not None:
        return run_model(args, trace, *model)
    cfg = SimConfig(policy=args.policy, eviction=args.eviction, page_size=args.page_size,
                    block_size=args.block_size, capacity=args.capacity,
                    max_prefill_tokens=args.budget, chunked_prefill_size=args.chunk)
    jobs = _jobs_within_budget(trace, args)
    tiers = hosttier.explain_tiers(args, trace) if args.host_ratio else []
    progress = None if args.quiet else StderrProgress("explain")
    result = explain(trace, cfg, what_if=not args.no_what_if, capacities=args.capacities,
                     top=args.top, progress=progress, jobs=jobs)
    if args.json:
        out = result.to_json()
        if tiers:
            out["host_tier"] = [t.to_json() for t in tiers]
        print(json.dumps(out, indent=1))
    else:
        print("\n".join([format_report(result), *hosttier.explain_tier_report(tiers, args.top)]))
    return 0


def run_model(args: argparse.Namespace, trace: Any, preset: Any, a: Any) -> int:
    from radix.cli import InputError
    from radix.cli.model import explain_json, format_explain
    from radix.cli.model_options import model_progress
    from radix.models.engines import describe
    from radix.runs.hybrid_compare import run_configs
    from radix.runs.hybrid_explain import explain_model

    if args.host_ratio:
        raise InputError("--host-ratio: not with --model (the host tier holds full-attention KV)")
    progress, budget = model_progress("explain", trace, args.quiet), args.memory << 20
    e = explain_model(trace, preset, a, args.top, progress, budget)
    e["assumptions"] = describe(preset, a)
    if not args.no_what_if:
        e["what_if"] = run_configs(trace, preset, a, args.jobs, progress, budget)
    print(json.dumps(explain_json(e), indent=1) if args.json else format_explain(e, args.top))
    return 0


def format_report(e: Explanation) -> str:
    cap = e.config["capacity"]
    lines = [f"{e.prompt_tokens:,} prompt tokens in {len(e.requests):,} requests; capacity "
             f"{capacity_label(cap)}; page {e.config['page_size']}"
             f"; blocks of {e.config['block_size']}; policy {e.config['policy']}, eviction "
             f"{e.config['eviction']}", "",
             f"{'bucket':26}{'radix tree':>22}{'block cache':>22}"]
    for b in BUCKETS:
        cells = [_cell(e.totals[s][b], e.prompt_tokens) if s in e.totals else "-"
                 for s in ("tree", "blocks")]
        lines.append(f"{LABELS[b]:26}{cells[0]:>22}{cells[1]:>22}")
    lines.append(f"{'recomputed (apart)':26}{e.recomputed['tree']:>22,}"
                 f"{e.recomputed['blocks']:>22,}")
    if any(e.recomputed.values()):  # issue 22: how the engines' own logs count these
        lines.append("  (re-admissions after retraction: vLLM logs their hits as preempted_hits, "
                     "SGLang drops them (retracted_stain); neither logged rate counts them)")
    for side in e.top_prefixes:
        lines += ["", f"prefixes that saved the most ({side})",
                  f"  {'tokens saved':>14} {'hits':>6}  tokens [start, end)  first ids"]
        for p in e.top_prefixes[side]:
            lines.append(f"  {p.tokens_saved:>14,} {p.requests:>6}  [{p.start:,}, {p.end:,})"
                         f"  {_ids(p)}{' ns ' + shown(p.namespace) if p.namespace else ''}")
    for side in e.top_losers:
        lines += ["", f"requests that lost the most ({side}: reusable tokens prefilled)"]
        for r in e.top_losers[side]:
            buckets = getattr(r, side)
            why = ", ".join(f"{LABELS[b]} {buckets[b]:,}" for b in BUCKETS
                            if buckets[b] and b not in ("hit", "first_seen"))
            by = r.tree_evicted_by if side == "tree" else r.blocks_evicted_by
            when = f"; evicted at step {by.step} ({by.policy.split(' ')[0]})" if by else ""
            lines.append(f"  {shown(r.rid):<12} step {r.step}: {why}{when}")
    lines += _what_if_tables(e)
    return "\n".join(lines)


def _jobs_within_budget(trace: Any, args: argparse.Namespace) -> int:
    """--jobs, lowered so every process fits --memory (said on stderr); InputError with the
    figures when even one does not."""
    wanted = 1 if args.no_what_if else args.jobs
    try:
        plan = memory.plan_workers(memory.estimate(trace), wanted, args.memory * 2**20)
    except MemoryError as exc:
        raise InputError(f"{exc} (--memory): raise --memory or explain a smaller trace") from None
    if plan.workers < wanted:
        print(f"explain: {plan.workers} what-if worker processes, not {wanted}: about "
              f"{plan.per_process // 2**20:,} MiB each, within --memory {args.memory:,} MiB",
              file=sys.stderr)
    return plan.workers


def _ids(p: PrefixSaved) -> str:
    """A hash-id trace's prefix as the trace has it: its blocks and their hash ids (not the
    tokens, hash id x 512 + k); a request trace's by its first token ids."""
    if p.hash_ids is None:
        return str(p.head[:4])
    more = " …" if len(p.hash_ids) == 8 and p.end - p.start > 8 * BLOCK_TOKENS else ""
    return f"{block_span(p.start, p.end)}, hash ids {p.hash_ids[:6]}{more}"


def _cell(tokens: int, total: int) -> str:
    return f"{tokens:,} ({tokens / total:.1%})" if total else f"{tokens:,}"


def _what_if_tables(e: Explanation) -> list[str]:
    if not e.what_if:
        return []
    out = ["", f"hit rate (all prompts) against KV capacity (working set {e.working_set:,} "
           "tokens)",
           f"  {'capacity':>14}{'tree':>9}{'blocks':>9}{'rejected':>10}"]
    for p in e.what_if["capacity"]:
        c = "unbounded" if p["capacity"] is None else f"{p['capacity']:,}"
        out.append(f"  {c:>14}{p['tree_hit_rate']:>9.1%}{p['block_hit_rate']:>9.1%}"
                   f"{p['rejected']:>10,}")
    out += ["", "hit rate against page / block size", f"  {'size':>14}{'tree':>9}{'blocks':>9}"]
    out += [f"  {p['page_size']:>14}{p['tree_hit_rate']:>9.1%}{p['block_hit_rate']:>9.1%}"
            for p in e.what_if["page_size"]]
    out += ["", "namespaces (extra_key, cache_salt)"]
    out += [f"  {'with' if p['namespaces'] else 'without':>14}{p['tree_hit_rate']:>9.1%}"
            f"{p['block_hit_rate']:>9.1%}" for p in e.what_if["namespaces"]]
    return out
