"""`python -m radix simulate TRACE --capacity N --host-ratio 2,4,8`: the host tier (HiCache).

Runs the trace through radix/hosttier (replay.py) with the device pool alone and then with a
host pool of each ratio (--hicache-ratio's meaning), and prints the hits split into device /
host (loaded back, priced over PCIe) / miss. `configs --host-ratio` does the same for the
configurations the host tier models (page 1, cache on: their eviction policies; `config_tiers`).
Leaves out: the scheduler (see replay.py).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from radix.cli.options import shown
from radix.hosttier.capacity import WRITE_POLICIES


def positive_ratio(text: str) -> float:
    """One host ratio, a number > 0 (`engine run/serve --host-ratio R` takes one)."""
    try:
        r = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not r > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return r


def parse_ratios(text: str) -> list[float]:
    """`2,4,8` -> [2.0, 4.0, 8.0]; each must be a number > 0."""
    return [positive_ratio(part) for part in text.split(",")]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-ratio", type=parse_ratios, default=None, metavar="R[,R...]",
                   help="add SGLang's host tier (HiCache) at these host/device ratios and "
                        "compare with the device alone (needs a bounded --capacity)")
    p.add_argument("--write-policy", choices=WRITE_POLICIES, default="write_through",
                   help="the host tier's write policy (--hicache-write-policy)")


def run(args: argparse.Namespace, trace: Any) -> int:
    from radix.cli import InputError
    from radix.hosttier.replay import compare_host_tiers, tier_table

    if args.capacity is None:
        raise InputError("--host-ratio needs a bounded --capacity (the device pool, tokens)")
    unused = [flag for flag, on in (("--page-size", args.page_size != 1),
                                    ("--no-cache", args.no_cache),
                                    ("--chunk", args.chunk is not None)) if on]
    if unused:
        raise InputError(f"--host-ratio runs requests whole, one at a time, at page 1 "
                         f"(radix/hosttier/replay.py): {', '.join(unused)} cannot apply")
    try:
        runs = compare_host_tiers(trace, args.capacity, args.host_ratio, args.write_policy,
                                  args.eviction)
    except ValueError as exc:
        raise InputError(f"--capacity: {exc}") from None
    if args.json:
        print(json.dumps([r._asdict() for r in runs], indent=1))
        return 0
    print(tier_table(runs))
    print(f"device {args.capacity:,} tokens; write policy {args.write_policy}; eviction "
          f"{args.eviction}; requests one at a time (radix/hosttier/replay.py); seconds are "
          "derived, not measured (Llama-3-8B on H100, PCIe 50 GB/s)")
    return 0


def config_tiers(args: argparse.Namespace, trace: Any,
                 configs: Any) -> dict[str, list[dict[str, Any]] | str]:
    """`configs --host-ratio`: per configuration, device only and each host ratio (the replay
    runs its eviction policy; scheduling order does not matter one request at a time), or why
    the host tier leaves it out (page size above 1, the cache disabled)."""
    from radix.cli import InputError
    from radix.hosttier.replay import compare_host_tiers

    if args.capacity is None or args.chunk is not None:
        raise InputError("--host-ratio needs a bounded --capacity (the device pool, tokens) and "
                         "no --chunk (radix/hosttier/replay.py runs requests whole)")
    out: dict[str, list[dict[str, Any]] | str] = {}
    for name, over in configs:
        if over.get("disable_cache") or over.get("page_size", 1) != 1:
            out[name] = "left out: the host tier replay runs page 1 with the cache on"
            continue
        try:
            runs = compare_host_tiers(trace, args.capacity, args.host_ratio, args.write_policy,
                                      over.get("eviction", "lru"))
        except ValueError as exc:
            raise InputError(f"--capacity: {exc}") from None
        out[name] = [r._asdict() for r in runs]
    return out


def config_tier_table(tiers: dict[str, list[dict[str, Any]] | str]) -> str:
    """One line per configuration and tier set: prompt tokens from device / host / computed."""
    lines = [f"{'host tier':<16}{'tiers':<14}{'device':>8}{'host':>8}{'miss':>8}"
             f"{'loaded back':>13}"]
    for name, runs in tiers.items():
        if isinstance(runs, str):
            lines.append(f"{name:<16}{runs}")
            continue
        for t in runs:
            p = t["prompt_tokens"] or 1
            lines.append(f"{name:<16}{t['name']:<14}{t['device_hit'] / p:>8.1%}"
                         f"{t['host_hit'] / p:>8.1%}{t['miss'] / p:>8.1%}"
                         f"{t['loaded_back']:>13,}")
    return "\n".join(lines)


def explain_tiers(args: argparse.Namespace, trace: Any) -> list[Any]:
    """`explain --host-ratio`: one HostTierExplanation per ratio (radix/hosttier/explain.py),
    or an InputError naming the option that cannot apply."""
    from radix.cli import InputError
    from radix.hosttier.explain import explain_host_tiers
    from radix.tree.evict_policy import get_strategy

    if args.capacity is None:
        raise InputError("--host-ratio needs a bounded --capacity (the device pool, tokens)")
    unused = [flag for flag, on in (("--page-size", args.page_size != 1),
                                    ("--chunk", args.chunk is not None)) if on]
    if unused:
        raise InputError(f"--host-ratio runs requests whole, one at a time, at page 1 "
                         f"(radix/hosttier/replay.py): {', '.join(unused)} cannot apply")
    try:
        get_strategy(args.eviction)
    except ValueError as exc:
        raise InputError(f"--eviction: {exc}") from None
    try:
        return explain_host_tiers(trace, args.capacity, args.host_ratio, args.write_policy,
                                  args.eviction)
    except ValueError as exc:
        raise InputError(f"--capacity: {exc}") from None


def explain_tier_report(explanations: list[Any], top: int = 10) -> list[str]:
    """Per ratio: the split, where the host hits came from, the requests that loaded the most
    back and the eviction that had demoted each of their nodes."""
    out: list[str] = []
    for e in explanations:
        r = e.run
        p = r.prompt_tokens or 1
        causes = e.by_cause()
        recomputed = sum(q.host_recomputed for q in e.requests)
        out += ["", f"host tier, {r.name} (host pool {r.host_tokens:,} tokens; {e.write_policy};"
                    f" eviction {e.eviction}; requests one at a time, radix/hosttier/replay.py)",
                f"  device hit {r.device_hit:,} ({r.device_hit / p:.1%}), host hit (loaded back) "
                f"{r.host_hit:,} ({r.host_hit / p:.1%}), miss {r.miss:,} ({r.miss / p:.1%})",
                f"  host hits demoted by another request's allocation {causes['allocation']:,}"
                f", by a load back's room {causes['load back']:,}; misses the host held "
                f"(recomputed: under the load-back threshold or the last token) {recomputed:,}"]
        lost: dict[str, int] = {}
        for q in e.requests:
            if q.lost_by is not None:
                lost[q.lost_by.cause] = lost.get(q.lost_by.cause, 0) + q.lost
        out.append(f"  misses cached before, on neither tier now {sum(lost.values()):,}"
                   + "".join(f"; {c} {n:,}" for c, n in sorted(lost.items())))
        rows = e.top(top)
        if rows:
            out.append("  requests that loaded the most back (and why it was on the host)")
        for q in rows:
            out.append(f"    {shown(q.rid):<12} device {q.device_hit:,}, host {q.host_hit:,}, "
                       f"miss {q.miss:,}")
            out += [f"      {line} ({e.eviction})" for line in _demotion_lines(q.demotions)]
        losers = sorted((q for q in e.requests if q.lost_by), key=lambda q: (-q.lost, q.index))
        if losers:
            out.append("  requests that lost the most (cached before, on neither tier now)")
        for q in losers[:top]:
            by = q.lost_by
            out.append(f"    {shown(q.rid):<12} {q.lost:,} tokens: {by.cause} while serving "
                       f"{shown(by.by_rid)} (#{by.by_index})")
    return out


def _demotion_lines(demotions: Any) -> list[str]:
    """One line per (request served, cause) of a request's loaded-back nodes, in load order:
    "11 tokens (node 4): demoted from the device while serving c2 (#2): its allocation evicted
    it"; more nodes are counted, the first three named."""
    groups: dict[tuple, list[Any]] = {}
    for d in demotions:
        groups.setdefault((d.by_index, d.by_rid, d.cause), []).append(d)
    out = []
    for (index, rid, cause), ds in groups.items():
        ids = ", ".join(str(d.node_id) for d in ds[:3]) + (", …" if len(ds) > 3 else "")
        nodes = f"node {ids}" if len(ds) == 1 else f"{len(ds)} nodes: {ids}"
        why = "its allocation" if cause == "allocation" else "loading its own host hit back"
        out.append(f"{sum(d.tokens for d in ds):,} tokens ({nodes}): demoted from the device "
                   f"while serving {shown(rid)} (#{index}): {why} evicted it")
    return out
