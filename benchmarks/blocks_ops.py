"""Microseconds per request of the block cache's operations (radix/block_manager.py).

Workload: 20,000 requests, 4,096 blocks of 16 tokens, 16 running at once (the oldest is freed
when a 17th starts). Each prompt = one of 16 system prompts (1,024 tokens) + one of 256 shared
contexts (512-1,024 tokens) + its own 200-600 tokens: ~2,200 tokens, ~137 blocks. Per request it
times hashing (all full blocks), lookup (get_computed_blocks), allocate + cache (allocate_slots)
and free, and prints p50/p90/mean as JSON and a table, beside vLLM 0.33's p50 on this machine
class (issue 3). Run: python benchmarks/blocks_ops.py [--requests N] [--seed S]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from radix.blocks.manager import BlockCacheManager  # noqa: E402
from radix.blocks.pool import BlockPool  # noqa: E402
from radix.request import Req  # noqa: E402

VLLM_P50_US = {"lookup": 189.0, "allocate": 105.0, "free": 44.0, "hashing": 548.0}
OPS = ("hashing", "lookup", "allocate", "free")


def make_requests(n: int, seed: int) -> list[Req]:
    rng = random.Random(seed)
    systems = [list(range(s * 2000, s * 2000 + 1024)) for s in range(16)]
    contexts = [list(range(100_000 + c * 2000, 100_000 + c * 2000 + rng.randint(512, 1024)))
                for c in range(256)]
    reqs = []
    for i in range(n):
        c = rng.randrange(256)
        own = 1_000_000 + i * 1000
        tokens = systems[c % 16] + contexts[c] + list(range(own, own + rng.randint(200, 600)))
        reqs.append(Req(f"r{i}", tokens))
    return reqs


def run(num_requests: int, seed: int, num_blocks: int = 4096, running: int = 16) -> dict:
    reqs = make_requests(num_requests, seed)
    m = BlockCacheManager(BlockPool(num_blocks, block_size=16))
    times: dict[str, list[float]] = {op: [] for op in OPS}
    live: list[Req] = []
    clock = time.perf_counter_ns
    hit_tokens = total_tokens = 0
    gc.disable()
    for req in reqs:
        if len(live) == running:
            old = live.pop(0)
            t0 = clock()
            m.free(old)
            times["free"].append(clock() - t0)
        t0 = clock()
        m.hash_request(req)
        t1 = clock()
        hit = m.get_computed_blocks(req)
        t2 = clock()
        blocks = m.allocate_slots(req, len(req.origin_input_ids) - hit.num_computed_tokens, hit)
        t3 = clock()
        assert blocks is not None, "pool too small for the running set"
        times["hashing"].append(t1 - t0)
        times["lookup"].append(t2 - t1)
        times["allocate"].append(t3 - t2)
        live.append(req)
        hit_tokens += hit.num_computed_tokens
        total_tokens += len(req.origin_input_ids)
    gc.enable()
    result = {"requests": num_requests, "num_blocks": num_blocks, "block_size": 16,
              "running": running, "mean_prompt_tokens": round(total_tokens / num_requests, 1),
              "hit_rate": round(hit_tokens / total_tokens, 4), "evictions": m.pool.num_evictions,
              "python": sys.version.split()[0], "ops": {}}
    for op in OPS:
        us = sorted(t / 1000 for t in times[op])
        result["ops"][op] = {"p50_us": round(statistics.median(us), 1),
                             "p90_us": round(us[int(0.9 * (len(us) - 1))], 1),
                             "mean_us": round(statistics.fmean(us), 1),
                             "vllm_p50_us": VLLM_P50_US[op],
                             "target_p50_us": VLLM_P50_US[op] / 2}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = run(args.requests, args.seed)
    print(json.dumps(result, indent=2))
    print(f"\n{'op':10} {'p50 us':>8} {'p90 us':>8} {'mean us':>8} {'vLLM p50':>9} "
          f"{'target':>7}  ok")
    for op, r in result["ops"].items():
        ok = "yes" if r["p50_us"] <= r["target_p50_us"] else "NO"
        print(f"{op:10} {r['p50_us']:8.1f} {r['p90_us']:8.1f} {r['mean_us']:8.1f} "
              f"{r['vllm_p50_us']:9.1f} {r['target_p50_us']:7.1f}  {ok}")
    print(f"\nhit rate {result['hit_rate']:.1%}, mean prompt {result['mean_prompt_tokens']} "
          f"tokens, evictions {result['evictions']}")


if __name__ == "__main__":
    main()
