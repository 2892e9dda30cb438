"""Benchmark: the unified tree with components against our full-only tree, and against SGLang
0.5.23's UnifiedRadixCache over its Rust TreeCore with the same components, per request.

One trace, chat-like: 8 shared 1,024-token prefixes, 256 own tokens, one output token, a KV
pool small enough to evict. Each contestant serves it request by request, the same way: match
prompt[:-1], lock the hit, the request's slots (Mamba: its state slots), KV for the rest with
eviction of the shortfall, then the finish: checkpoint into the tree, free, unlock. Rounds are
interleaved (the contestants in a rotating order, each on a fresh cache); the figures are
medians over rounds of the process CPU time per request (a shared machine's waits left out),
and ratios to our full-only RadixCache (with the lowest and highest round's ratio) and to the
unified tree with FULL alone. Our pools skip their double-free bookkeeping (check=False), as
SGLang's do (its invariant checks are off by default).
Contestants: ours: RadixCache (flavor "unified"), UnifiedRadixCache with FULL, FULL+SWA
(window 128) and FULL+MAMBA (chunk 64, extra_buffer); with --sglang ROOT (an unpacked wheel),
SGLang's UnifiedRadixCache, Rust TreeCore, FULL+SWA and FULL+MAMBA over its own pools on CPU.
--what-if adds FULL+SWA with new leaves not split to one window (not SGLang's rule: what the
cap costs). With --other ROOT (another checkout, e.g. `git archive main | tar -x -C
/tmp/main`), each round also runs that checkout's four contestants of ours, one round in a
fresh subprocess: before and after figures from one run. A fresh process reads slower on the
same code (its RadixCache too), so compare the two checkouts by their ratios to RadixCache.

    python benchmarks/hybrid_tree.py --rounds 7 --requests 300 --sglang /tmp/sgl/ex
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from radix.request import Req, SlotAllocator  # noqa: E402
from radix.tree.components.base import SWA  # noqa: E402
from radix.tree.hybrid_lifecycle import SchedulerKnobs, serve  # noqa: E402
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator  # noqa: E402
from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402
from radix.tree.unified_radix_cache import UnifiedRadixCache  # noqa: E402

POOL, WINDOW, STATES = 24_576, 128, 64


def workload(num_requests: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(32_000) for _ in range(1024)] for _ in range(8)]
    return [rng.choice(prefixes) + [rng.randrange(32_000) for _ in range(256)]
            for _ in range(num_requests)]


def run_radix(prompts) -> None:
    alloc = SlotAllocator(POOL, check=False)
    cache = RadixCache(allocator=alloc)
    for i, p in enumerate(prompts):
        req = Req(f"r{i}", p, max_new_tokens=1)
        m = cache.match_prefix(RadixKey(p[:-1]))
        cache.inc_lock_ref(m.last_node)
        req.last_node, req.cache_protected_len = m.last_node, m.prefix_len
        n = len(p) - m.prefix_len
        if alloc.available_size() < n:
            cache.evict(n - alloc.available_size())
        req.slot_ids = list(m.slot_ids) + alloc.alloc(n)
        req.output_ids.append(0)
        cache.release_kv_cache(req, checkpoint=True)


def run_unified(prompts, comps: tuple[str, ...], uncapped: bool = False) -> None:
    swa, mamba = "swa" in comps, "mamba" in comps
    cache = UnifiedRadixCache(
        comps, sliding_window_size=WINDOW if swa else None,
        allocator=SWASlotAllocator(POOL, POOL, check=False) if swa
        else SlotAllocator(POOL, check=False),
        mamba_pool=MambaSlotPool(STATES) if mamba else None)
    if uncapped:  # the what-if: SWA does not split a new leaf to a window (not SGLang's rule)
        cache.components[SWA]._cap_leaf = lambda leaf: None
        cache._add_capped_leaf = None
    knobs = SchedulerKnobs()
    for i, p in enumerate(prompts):
        serve(cache, Req(f"r{i}", p, max_new_tokens=1), knobs)


def sglang_runner(root: Path, comps: tuple[str, ...]):
    from known_sglang_hybrid import serve as sg_serve
    from known_sglang_hybrid import side
    from sglang_hybrid import SGReq
    from sglang_unified import load_unified

    usg = load_unified(root)

    def run(prompts) -> None:
        sg = side(usg, comps, "rust", True, window=WINDOW if "swa" in comps else None,
                  size=POOL, width=2048, mamba_size=STATES)
        for i, p in enumerate(prompts):
            sg_serve(sg, SGReq(f"r{i}", p, 1))

    return run


def contestants(sglang: Path | None, what_if: bool = False) -> dict:
    out = {"ours RadixCache": run_radix,
           "ours unified FULL": lambda p: run_unified(p, ("full",)),
           "ours unified FULL+SWA": lambda p: run_unified(p, ("full", "swa")),
           "ours unified FULL+MAMBA": lambda p: run_unified(p, ("full", "mamba"))}
    if what_if:
        out["ours SWA, leaves uncapped"] = lambda p: run_unified(p, ("full", "swa"), True)
    if sglang is not None:
        out["SGLang rust FULL+SWA"] = sglang_runner(sglang, ("full", "swa"))
        out["SGLang rust FULL+MAMBA"] = sglang_runner(sglang, ("full", "mamba"))
    return out


# one round of another checkout's contestants of ours, in a fresh process (its own code)
OTHER_ROUND = r"""
import json, sys, time
sys.path.insert(0, ".")
sys.argv = ["x"]
import benchmarks.hybrid_tree as h
prompts, runners = h.workload(%d), h.contestants(None)
names = list(runners)
out = {}
for name in names[%d %% len(names):] + names[:%d %% len(names)]:
    t0 = time.process_time()
    runners[name](prompts)
    out[name] = (time.process_time() - t0) / len(prompts)
print(json.dumps(out))
"""


def other_round(root: Path, requests: int, r: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", OTHER_ROUND % (requests, r, r)], cwd=root,
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(times: dict[str, list[float]]) -> dict[str, dict]:
    """Medians, their ratios, and the lowest and highest round's ratio to RadixCache (each
    round's time over that round's RadixCache time)."""
    med = {n: statistics.median(t) for n, t in times.items()}
    base, full = med["ours RadixCache"], med["ours unified FULL"]
    per_round = {n: [a / b for a, b in zip(t, times["ours RadixCache"], strict=True)]
                 for n, t in times.items()}
    return {n: {"us_per_request": round(m * 1e6, 1), "x_radix_cache": round(m / base, 2),
                "x_radix_cache_range": [round(min(per_round[n]), 2), round(max(per_round[n]), 2)],
                "x_unified_full": round(m / full, 2)} for n, m in med.items()}


def print_rows(rows: dict[str, dict], prefix: str = "") -> None:
    for n, row in rows.items():
        lo, hi = row["x_radix_cache_range"]
        print(f"{prefix + n[len('ours ') if prefix else 0:]:26} {row['us_per_request']:11,.1f} "
              f"{row['x_radix_cache']:13.2f} {f'{lo:.2f}..{hi:.2f}':>12} "
              f"{row['x_unified_full']:15.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--sglang", type=Path, default=None, help="folder of the unpacked wheel")
    ap.add_argument("--other", type=Path, default=None,
                    help="another checkout whose contestants of ours run beside (before/after)")
    ap.add_argument("--what-if", action="store_true",
                    help="also FULL+SWA with leaves not capped to a window (the cap's cost)")
    args = ap.parse_args()
    prompts = workload(args.requests)
    runners = contestants(args.sglang, args.what_if)
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    other: dict[str, list[float]] = {}
    for r in range(args.rounds):
        if args.other is not None and r % 2:  # the other checkout first every other round
            for n, t in other_round(args.other, args.requests, r).items():
                other.setdefault(n, []).append(t)
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.process_time()
            runners[name](prompts)
            times[name].append((time.process_time() - t0) / len(prompts))
        if args.other is not None and not r % 2:
            for n, t in other_round(args.other, args.requests, r).items():
                other.setdefault(n, []).append(t)
    rows = table(times)
    out = {"requests": args.requests, "rounds": args.rounds, "clock": "process CPU time",
           "results": rows}
    if other:
        out["other"] = {"root": str(args.other), "results": table(other)}
    print(json.dumps(out, indent=1))
    print(f"\n{'contestant':26} {'us/request':>11} {'x RadixCache':>13} {'(min..max)':>12} "
          f"{'x unified FULL':>15}")
    print_rows(rows)
    print_rows(out.get("other", {}).get("results", {}), "other: ")


if __name__ == "__main__":
    main()
