"""Replay the Mooncake sample through both caches (bounded) and through the simulator.

Prints JSON, then a table: wall time, CPU time and peak resident memory of (1) the radix tree
alone, (2) vLLM's block cache alone (the block-extent cache: exact, at the cost of runs), each
replaying every request's prompt in arrival order with a bounded capacity (match/lookup,
insert/allocate, then release), and (3) `simulate` with both. All in real tokens (a Mooncake
hash id is 512 tokens, held as runs). Target on this machine class: under 10 s and under 1.5 GB.
Not part of the test run. Usage: python benchmarks/replay.py [TRACE] [--capacity TOKENS]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.blocks.manager import BlockCacheManager, ExtentPool  # noqa: E402
from radix.request import (
    Req,  # noqa: E402
    SlotAllocator,  # noqa: E402
)
from radix.runs.sim import SimConfig, simulate  # noqa: E402
from radix.tokens import joined  # noqa: E402
from radix.traces import load_trace  # noqa: E402
from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

DEFAULT_TRACE = (Path(__file__).resolve().parents[1] / "examples" / "traces"
                 / "mooncake_synthetic_trace.jsonl.gz")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def replay_tree(trace, capacity: int) -> dict:
    """Each request: match, take slots for the rest (evicting when short), insert, free dups."""
    alloc = SlotAllocator(capacity, runs=True)
    tree = RadixCache(allocator=alloc)
    hit = total = evicted = 0
    for tr in trace.requests:
        key = RadixKey(tr.token_ids)
        m = tree.match_prefix(key)
        need = len(key) - m.prefix_len
        if alloc.available_size() < need:
            evicted += tree.evict(need - alloc.available_size()).num_evicted
        slots = alloc.alloc(need)
        total += len(key)
        if slots is None:  # larger than the pool: count as a miss, do not cache
            continue
        row = joined(m.slot_ids, slots)
        res = tree.insert(key, row)
        alloc.free(row[m.prefix_len:res.prefix_len])
        hit += m.prefix_len
    return {"hit_rate": hit / total, "evicted_tokens": evicted}


def replay_blocks(trace, capacity: int, block_size: int = 16) -> dict:
    """Each request: get_computed_blocks, allocate_slots for the rest, free."""
    mgr = BlockCacheManager(ExtentPool(capacity // block_size + 1, block_size))
    hit = total = 0
    for k, tr in enumerate(trace.requests):
        req = Req(f"b{k}", tr.token_ids)
        computed = mgr.get_computed_blocks(req)
        if mgr.allocate_slots(req, len(tr.token_ids) - computed.num_computed_tokens,
                              computed) is not None:
            hit += computed.num_computed_tokens
        total += len(tr.token_ids)
        mgr.free(req)
    return {"hit_rate": hit / total, "evictions": mgr.num_evictions,
            "unreachable_blocks": mgr.num_unreachable_blocks()}


def timed(name: str, fn, *args) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    return {"name": name, "wall_s": round(time.perf_counter() - t0, 3),
            "cpu_s": round(time.process_time() - c0, 3), "peak_rss_mb": round(peak_mb(), 1),
            **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    ap.add_argument("--capacity", type=int, default=4_000_000, help="real tokens (default 4M)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = load_trace(args.trace)
    rows = [{"name": "load", "wall_s": round(time.perf_counter() - t0, 3),
             "cpu_s": round(time.process_time(), 3), "peak_rss_mb": round(peak_mb(), 1)},
            timed("radix tree", replay_tree, trace, args.capacity),
            timed("block cache", replay_blocks, trace, args.capacity),
            timed("simulate (tree + blocks)",
                  lambda: _sim_totals(simulate(trace, SimConfig(capacity=args.capacity))))]
    total = round(time.perf_counter() - t0, 3)
    print(json.dumps({"trace": args.trace, "requests": len(trace.requests),
                      "prompt_tokens": sum(trace.input_lens), "capacity_tokens": args.capacity,
                      "rows": rows, "total_wall_s": total, "peak_rss_mb": round(peak_mb(), 1)},
                     indent=1))
    print(f"\n{'step':<26}{'wall s':>8}{'cpu s':>8}{'peak MB':>9}  result")
    for r in rows:
        extra = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in r.items() if k not in ("name", "wall_s", "cpu_s",
                                                             "peak_rss_mb"))
        print(f"{r['name']:<26}{r['wall_s']:>8.2f}{r['cpu_s']:>8.2f}{r['peak_rss_mb']:>9.0f}"
              f"  {extra}")
    print(f"{'total':<26}{total:>8.2f}{time.process_time():>8.2f}{peak_mb():>9.0f}"
          "  (target < 10 s, < 1,536 MB)")


def _sim_totals(res) -> dict:
    t = res.totals
    return {k: t[k] for k in ("hit_rate", "block_hit_rate", "prefilled_tokens", "ttft_p50_s",
                              "evicted_tokens", "unreachable_blocks")}


if __name__ == "__main__":
    main()
