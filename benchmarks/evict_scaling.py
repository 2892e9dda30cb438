"""Benchmark: evicting one leaf of a RadixCache with 100 to 30,000 evictable leaves.

SGLang heapifies every evictable leaf on each evict call (O(n)); ours keeps a lazily invalidated
heap across calls (radix/tree/eviction.py), so one leaf costs O(log n). Each sample: evict(1)
with n leaves under a 64-token shared prefix, then one leaf re-inserted. Prints JSON, then a
table. Usage: python benchmarks/evict_scaling.py [--repeats 200]
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


def evict_one_leaf(num_leaves: int, repeats: int = 200) -> dict:
    """p50 of evict(1) with num_leaves evictable leaves (one leaf re-inserted after each)."""
    cache = RadixCache()
    shared = list(range(64))
    for i in range(num_leaves):
        cache.insert(shared + [10_000 + i, i])
    samples = []
    nxt = num_leaves
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        r = cache.evict(1)
        samples.append((time.perf_counter_ns() - t0) / 1000)
        assert len(r.evicted_nodes) == 1
        cache.insert(shared + [10_000 + nxt, nxt])
        nxt += 1
    assert len(cache.evictable_leaves) == num_leaves
    return {"leaves": num_leaves, "p50_us": statistics.median(samples),
            "mean_us": statistics.fmean(samples)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    result = [evict_one_leaf(k, args.repeats) for k in (100, 1_000, 10_000, 30_000)]
    print(json.dumps(result, indent=1))
    base = result[0]["p50_us"]
    print(f"\n{'evictable leaves':<18}{'p50 us':>10}{'x of 100':>10}")
    for e in result:
        print(f"{e['leaves']:<18,}{e['p50_us']:>10.1f}{e['p50_us'] / base:>10.2f}")


if __name__ == "__main__":
    main()
