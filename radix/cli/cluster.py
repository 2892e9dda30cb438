"""`python -m radix cluster TRACE --replicas 1,2,4,8 --router all`: the simulated cluster.

Each (replicas, router) pair replays the trace through that many simulated engines behind the
router (radix/cluster/sim.py) and reports, per pair: the prompt-token hit rate (tree and vLLM
blocks) overall and per replica, the load spread (max / mean busy time), TTFT p50 / p99,
throughput (tokens / simulated second) and the router's decisions by reason. Seconds come from
the cost model (derived, not measured). `--host-ratio 2,4` adds SGLang's host tier (HiCache) to
every replica and prints, per pair, the hits split device / host (loaded back) / miss, device
only against each ratio (radix/cluster/hosttier.py). Leaves out: per-request rows (`--json`
has the totals).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from radix.cli import InputError, hosttier
from radix.cluster import ROUTERS
from radix.cluster.hosttier import cluster_host_tiers
from radix.cluster.sim import MAX_REPLICAS, simulate_cluster
from radix.runs.sim import SimConfig
from radix.traces import TraceError, load_trace


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("cluster", help="N simulated replicas behind each router")
    p.add_argument("trace", help="a request or Mooncake trace")
    p.add_argument("--replicas", type=replica_list, default=[1, 2, 4, 8],
                   help="comma-separated replica counts (default 1,2,4,8)")
    p.add_argument("--router", type=router_list, default=list(ROUTERS),
                   help=f"comma-separated routers or 'all' ({', '.join(ROUTERS)})")
    p.add_argument("--capacity", type=int, default=None,
                   help="KV pool of each replica, tokens (default: no limit)")
    p.add_argument("--page-size", type=int, default=1, help="tree page size")
    p.add_argument("--block-size", type=int, default=16, help="vLLM block size (the shadow)")
    p.add_argument("--route-block", type=int, default=None,
                   help="tokens per routing block (default: 512 for Mooncake, else 16)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    hosttier.add_options(p)
    p.set_defaults(func=run_cluster, memory_hint=MEMORY_HINT)


MEMORY_HINT = "try fewer --replicas, a smaller trace or a smaller --capacity"


def replica_list(text: str) -> list[int]:
    """`--replicas`: whole numbers in [1, MAX_REPLICAS], checked before any run.

    >>> replica_list("1,2,4")
    [1, 2, 4]
    """
    parts = text.split(",")
    if any(len(x.strip()) > 7 for x in parts):  # int() of a 10,000-digit string is slow
        raise argparse.ArgumentTypeError(
            f"--replicas must all be <= {MAX_REPLICAS:,}, got {text[:40]!r}")
    try:
        out = [int(x) for x in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--replicas must be comma-separated whole numbers, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"--replicas must all be >= 1, got {text!r}")
    if max(out) > MAX_REPLICAS:
        raise argparse.ArgumentTypeError(
            f"--replicas must all be <= {MAX_REPLICAS:,} (each is a simulated engine with its "
            f"own tree and pool), got {max(out):,}")
    return out


def router_list(text: str) -> list[str]:
    """`--router`: names of ROUTERS or `all` (all of them), comma-separated, each once.

    >>> router_list("all,random") == list(ROUTERS)
    True
    """
    names: list[str] = []
    for name in text.split(","):
        for n in (ROUTERS if name == "all" else (name,)):
            if n not in names:
                names.append(n)
    bad = [n for n in names if n not in ROUTERS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"--router: unknown {', '.join(map(repr, bad))}; one of all, {', '.join(ROUTERS)}")
    return names


def load_sim_trace(path: str):
    try:
        trace = load_trace(path)
    except TraceError as exc:
        raise InputError(f"{path}: {exc}") from None
    if trace.format not in ("request", "mooncake"):
        raise InputError(f"{path}: cluster needs a request or Mooncake trace, got a "
                         f"{trace.format} trace")
    return trace


def sim_config(capacity: int | None, page_size: int, block_size: int) -> SimConfig:
    if capacity is not None and capacity < 1:
        raise InputError(f"--capacity must be >= 1, got {capacity}")
    return SimConfig(capacity=capacity, page_size=page_size, block_size=block_size)


def run_cluster(args: argparse.Namespace) -> int:
    trace = load_sim_trace(args.trace)
    cfg = sim_config(args.capacity, args.page_size, args.block_size)
    if args.route_block is not None and args.route_block < 1:
        raise InputError(f"--route-block must be >= 1, got {args.route_block}")
    if args.host_ratio and (args.capacity is None or args.page_size != 1):
        raise InputError("--host-ratio needs a bounded --capacity (each replica's device pool, "
                         "tokens) and --page-size 1 (radix/hosttier/replay.py runs page 1)")
    results = [_pair(trace, n, router, cfg, args) for n in args.replicas for router in args.router]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(table(results))
    if args.host_ratio:
        print(host_table(results, args.write_policy))
    cap = "unbounded" if args.capacity is None else f"{args.capacity:,} tokens"
    print(f"capacity per replica {cap}; seconds are {results[0]['totals']['cost_label']}")
    return 0


def _pair(trace: Any, n: int, router: str, cfg: SimConfig,
          args: argparse.Namespace) -> dict[str, Any]:
    res = simulate_cluster(trace, n, router, cfg, block_size=args.route_block,
                           keep_decisions=bool(args.host_ratio))
    out = res.summary()
    if args.host_ratio:
        try:
            runs = cluster_host_tiers(trace, res.decisions, n, args.capacity, args.host_ratio,
                                      args.write_policy)
        except ValueError as exc:  # a device pool under one Mooncake block
            raise InputError(f"--capacity: {exc}") from None
        out["host_tier"] = [r._asdict() for r in runs]
    return out


def host_table(results: list[dict[str, Any]], write_policy: str) -> str:
    """Per pair and tier configuration: prompt tokens from the device / the host / computed."""
    lines = [f"host tier ({write_policy}; each replica's requests one at a time, routed as "
             "above):", f"{'N':>3} {'router':<16}{'tiers':<14}{'device':>8}{'host':>8}"
             f"{'miss':>8}{'loaded back':>13}{'load s':>8}"]
    for r in results:
        for t in r["host_tier"]:
            p = t["prompt_tokens"] or 1
            lines.append(f"{r['replicas']:>3} {r['router']:<16}{t['name']:<14}"
                         f"{t['device_hit'] / p:>8.1%}{t['host_hit'] / p:>8.1%}"
                         f"{t['miss'] / p:>8.1%}{t['loaded_back']:>13,}{t['load_s']:>8.2f}")
    return "\n".join(lines)


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'N':>3} {'router':<16}{'hit':>7}{'blocks':>8}{'p50 s':>9}{'p99 s':>9}"
            f"{'tok/s':>10}{'spread':>8}  per-replica hit / decisions")
    lines = [head]
    for r in results:
        t = r["totals"]
        per = " ".join(f"{p['hit_rate']:.0%}" for p in r["per_replica"])
        why = ", ".join(f"{k} {v}" for k, v in r["reasons"].items())
        lines.append(f"{r['replicas']:>3} {r['router']:<16}{t['hit_rate']:>7.1%}"
                     f"{t.get('block_hit_rate', 0.0):>8.1%}{t['ttft_p50_s']:>9.3f}"
                     f"{t['ttft_p99_s']:>9.3f}{t['throughput_tok_s']:>10,.0f}"
                     f"{t['load_spread']:>8.2f}  [{per}] {why}")
    return "\n".join(lines)
