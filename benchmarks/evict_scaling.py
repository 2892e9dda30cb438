"""Benchmark: evicting one leaf of a RadixCache with 100 to 30,000 evictable leaves.

SGLang heapifies every evictable leaf on each evict call (O(n)); ours keeps a lazily invalidated
heap across calls (radix/tree/evict_policy.py), so one leaf costs O(log n). Each sample: evict(1)
with n leaves under a 64-token shared prefix, then one leaf re-inserted. The four caches are
built first, then timed in interleaved rounds (100, 1,000, 10,000, 30,000, 100, ...) so that a
machine whose speed drifts (a shared one) slows every size alike; each size's figure is the
median of its rounds' medians, with the lowest and highest round beside it. Prints JSON, then a
table. Usage: python benchmarks/evict_scaling.py [--repeats 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.tree.radix_cache import RadixCache  # noqa: E402

SIZES = (100, 1_000, 10_000, 30_000)
SHARED = list(range(64))


def leafy_cache(num_leaves: int) -> RadixCache:
    """num_leaves evictable leaves of 2 tokens under one 64-token shared prefix."""
    cache = RadixCache()
    for i in range(num_leaves):
        cache.insert(SHARED + [10_000 + i, i])
    return cache


def evict_round(cache: RadixCache, repeats: int, nxt: int) -> tuple[float, int]:
    """p50 µs of evict(1) over `repeats` samples (one leaf re-inserted after each); the next
    fresh leaf number."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        r = cache.evict(1)
        samples.append((time.perf_counter_ns() - t0) / 1000)
        assert len(r.evicted_nodes) == 1
        cache.insert(SHARED + [10_000 + nxt, nxt])
        nxt += 1
    return statistics.median(samples), nxt


def measure(repeats: int, rounds: int) -> list[dict]:
    caches = {n: leafy_cache(n) for n in SIZES}
    nxt = dict.fromkeys(SIZES, 10**6)
    p50s: dict[int, list[float]] = {n: [] for n in SIZES}
    for _ in range(rounds):
        for n in SIZES:
            p50, nxt[n] = evict_round(caches[n], repeats, nxt[n])
            p50s[n].append(p50)
    for n in SIZES:
        assert len(caches[n].evictable_leaves) == n
    return [{"leaves": n, "p50_us": statistics.median(p50s[n]), "round_p50s_us": p50s[n]}
            for n in SIZES]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200, help="samples per round and size")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    result = measure(args.repeats, args.rounds)
    print(json.dumps(result, indent=1))
    base = result[0]["p50_us"]
    print(f"\n{'evictable leaves':<18}{'p50 us':>10}{'rounds min-max':>18}{'x of 100':>10}")
    for e in result:
        lo, hi = min(e["round_p50s_us"]), max(e["round_p50s_us"])
        print(f"{e['leaves']:<18,}{e['p50_us']:>10.1f}{f'{lo:.1f}-{hi:.1f}':>18}"
              f"{e['p50_us'] / base:>10.2f}")


if __name__ == "__main__":
    main()
