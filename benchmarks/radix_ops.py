"""Benchmark: microseconds per RadixCache call on a customer-support workload, and evict scaling.

Workload: a 512-token system prompt + a 1,543-token few-shot block shared by every request;
300 users, each in a conversation that grows turn by turn (a 20-120 token message, a 40-250
token reply) and restarts after 2-10 turns; 20,000 requests; KV capacity 100,000 tokens so
eviction fires. Each request: match_prefix, inc_lock_ref, slots for its new tokens (evict when
short), insert of prompt + reply (as cache_finished_req does), dec_lock_ref.
Then: evict of one leaf with 100 / 1,000 / 10,000 / 30,000 evictable leaves.
Prints JSON, then a table. Usage: python benchmarks/radix_ops.py [--requests N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.allocator import SlotAllocator  # noqa: E402
from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

# SGLang's own RadixCache on this machine class (issue #2): p50 microseconds
SGLANG_P50 = {"match_prefix": 61, "insert": 84, "evict": 55, "inc_lock_ref": 8}
SGLANG_EVICT_ONE = {100: 29, 10_000: 6300}


class Workload:
    """Deterministic conversations over one shared prefix; token ids never collide."""

    def __init__(self, num_users: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_tok = 100_000
        self.prefix = self.take(512) + self.take(1543)
        self.users = [self.new_conversation() for _ in range(num_users)]

    def take(self, n: int) -> list[int]:
        out = list(range(self.next_tok, self.next_tok + n))
        self.next_tok += n
        return out

    def new_conversation(self) -> dict:
        return {"context": list(self.prefix), "turns_left": self.rng.randint(2, 10)}

    def next_request(self) -> tuple[list[int], list[int]]:
        """(prompt, reply) of the next turn of a random user."""
        u = self.rng.randrange(len(self.users))
        conv = self.users[u]
        if conv["turns_left"] == 0:
            conv = self.users[u] = self.new_conversation()
        prompt = conv["context"] + self.take(self.rng.randint(20, 120))
        reply = self.take(self.rng.randint(40, 250))
        conv["context"] = prompt + reply
        conv["turns_left"] -= 1
        return prompt, reply


def timed(samples: dict, name: str, fn, *args):
    t0 = time.perf_counter_ns()
    out = fn(*args)
    samples[name].append((time.perf_counter_ns() - t0) / 1000)
    return out


def run_workload(num_requests: int, page_size: int, capacity: int, seed: int = 0) -> dict:
    alloc = SlotAllocator(capacity, check=False)  # SGLang's allocator has no double-free check
    cache = RadixCache(page_size=page_size, allocator=alloc)
    work = Workload(300, seed)
    samples = {k: [] for k in ("match_prefix", "insert", "evict", "inc_lock_ref", "dec_lock_ref")}
    hit = total = 0
    for _ in range(num_requests):
        prompt, reply = work.next_request()
        key = RadixKey(prompt)
        m = timed(samples, "match_prefix", cache.match_prefix, key)
        timed(samples, "inc_lock_ref", cache.inc_lock_ref, m.last_node)
        need = len(prompt) + len(reply) - m.prefix_len
        if alloc.available_size() < need:
            timed(samples, "evict", cache.evict, need - alloc.available_size())
        slots = m.slot_ids + alloc.alloc(need)
        full = RadixKey(prompt + reply)
        aligned = len(full) // page_size * page_size
        r = timed(samples, "insert", cache.insert, full[:aligned], slots[:aligned])
        alloc.free(slots[m.prefix_len : r.prefix_len] + slots[aligned:])
        timed(samples, "dec_lock_ref", cache.dec_lock_ref, m.last_node)
        hit += m.prefix_len
        total += len(prompt)
    cache.check_invariants()
    stats = {
        name: {"p50_us": statistics.median(v), "mean_us": statistics.fmean(v), "calls": len(v)}
        for name, v in samples.items() if v
    }
    return {"page_size": page_size, "capacity": capacity, "requests": num_requests,
            "hit_rate": hit / total, "nodes": len(cache._nodes), "ops": stats}


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
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="2,000 requests (a smoke run)")
    args = ap.parse_args()
    n = 2_000 if args.quick else args.requests
    if n < 1 or args.capacity < 50_000:
        ap.error("--requests must be >= 1 and --capacity >= 50,000 (a prompt is up to ~5k)")
    result = {
        "workload": [run_workload(n, ps, args.capacity) for ps in (1, 16)],
        "evict_one_leaf": [evict_one_leaf(k) for k in (100, 1_000, 10_000, 30_000)],
        "sglang_p50_us": SGLANG_P50,
        "sglang_evict_one_leaf_p50_us": SGLANG_EVICT_ONE,
    }
    print(json.dumps(result, indent=1))
    print(f"\n{'op':<14}{'page':>5}{'p50 us':>10}{'mean us':>10}{'calls':>8}{'SGLang p50':>12}"
          f"{'ours/SGLang':>13}")
    for w in result["workload"]:
        for name, s in w["ops"].items():
            ref = SGLANG_P50.get(name)
            ratio = f"{s['p50_us'] / ref:.2f}" if ref else "-"
            print(f"{name:<14}{w['page_size']:>5}{s['p50_us']:>10.1f}{s['mean_us']:>10.1f}"
                  f"{s['calls']:>8}{ref or '-':>12}{ratio:>13}")
    base = result["evict_one_leaf"][0]["p50_us"]
    print(f"\n{'evictable leaves':<18}{'p50 us':>10}{'x of 100':>10}")
    for e in result["evict_one_leaf"]:
        print(f"{e['leaves']:<18,}{e['p50_us']:>10.1f}{e['p50_us'] / base:>10.2f}")
    for w in result["workload"]:
        print(f"page {w['page_size']}: hit rate {w['hit_rate']:.1%}, {w['nodes']:,} nodes at end")


if __name__ == "__main__":
    main()
