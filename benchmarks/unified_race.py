"""Benchmark: our RadixCache against SGLang 0.5.23's classic RadixCache and its UnifiedRadixCache
over the Python and the Rust TreeCore, in one process, interleaved rounds.

Each round builds a fresh cache per contestant (in a rotating order) and runs the same request
loop: match_prefix on prompt[:-1], lock the match, insert prompt + output, unlock, and evict
the excess past a capacity. Each call is timed alone (per-call medians over the round) and the
loop as a whole; the figures printed are medians over rounds and ratios to ours. Keys and values
are built before the clock starts, each side in its own types (SGLang: int64 arrays and
tensors; ours: lists). Needs the unpacked wheel (tools/sglang_unified.py loads it on CPU).
Timings on a shared machine are noisy: quote medians, with the command.

    python benchmarks/unified_race.py /tmp/sgl/ex --rounds 7 --requests 400
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from sglang_unified import build, load_unified  # noqa: E402

from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

CALLS = ("match", "lock", "insert", "unlock", "evict")


def workload(num_requests: int, seed: int = 0) -> list[list[int]]:
    """Chat-like requests: one of 8 shared 256-token prefixes, 64 own tokens, 32 output."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(32_000) for _ in range(256)] for _ in range(8)]
    return [rng.choice(prefixes) + [rng.randrange(32_000) for _ in range(96)]
            for _ in range(num_requests)]


class Ours:
    name = "ours (unified flavor)"

    def __init__(self, sg, reqs) -> None:
        self.cache = RadixCache(flavor="unified")
        self.keys = [(RadixKey(r[:-1]), RadixKey(r), list(range(len(r)))) for r in reqs]

    def match(self, i):
        return self.cache.match_prefix(self.keys[i][0]).last_node

    def lock(self, node):
        self.cache.inc_lock_ref(node)
        return node

    def insert(self, i):
        _, key, value = self.keys[i]
        self.cache.insert(key, value)

    def unlock(self, handle):
        self.cache.dec_lock_ref(handle)

    def evict(self, n):
        self.cache.evict(n)

    def size(self):
        return self.cache.total_size()


class NullAllocator:
    def free(self, slots) -> None: ...
    def free_segment(self, slots, start_pos: int = 0) -> None: ...


class Classic:
    name = "SGLang classic RadixCache"

    def __init__(self, sg, reqs) -> None:
        import torch
        self.sg = sg
        self.cache = sg.radix.RadixCache(sg.params.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=1))
        self.cache.token_to_kv_pool_allocator = NullAllocator()
        rk = sg.radix.RadixKey
        self.keys = [(sg.base.MatchPrefixParams(key=rk(array("q", r[:-1]))),
                      sg.base.InsertParams(key=rk(array("q", r)),
                                           value=torch.arange(len(r), dtype=torch.int64)))
                     for r in reqs]

    def match(self, i):
        return self.cache.match_prefix(self.keys[i][0]).last_device_node

    def lock(self, node):
        self.cache.inc_lock_ref(node)
        return node

    def insert(self, i):
        self.cache.insert(self.keys[i][1])

    def unlock(self, handle):
        self.cache.dec_lock_ref(handle)

    def evict(self, n):
        self.cache.evict(self.sg.base.EvictParams(num_tokens=n))

    def size(self):
        return self.cache.evictable_size() + self.cache.protected_size()


class Unified(Classic):
    def __init__(self, sg, reqs, core: str) -> None:
        super().__init__(sg, reqs)
        self.name = f"SGLang UnifiedRadixCache, {core} core"
        alloc = sg.alloc_base.BaseTokenToKVPoolAllocator
        alloc_class = type("Pool", (alloc,), {
            "__init__": lambda self, *a: alloc.__init__(self, *a),
            "clear": lambda self: None, "alloc": lambda self, n: None,
            "available_size": lambda self: 0, "free": lambda self, idx: None})
        params = sg.params.CacheInitParams(
            disable=False, req_to_token_pool=None, page_size=1,
            token_to_kv_pool_allocator=alloc_class(1 << 20, 1, None, "cpu", None, False))
        self.cache = build(sg, params, core)

    def lock(self, node):
        return self.cache.lock(node)

    def unlock(self, handle):
        self.cache.unlock(handle)


def one_round(contestant, num_requests: int, capacity: int) -> dict:
    per_call = {c: [] for c in CALLS}
    clock = time.perf_counter_ns
    t_loop = clock()
    for i in range(num_requests):
        t0 = clock()
        node = contestant.match(i)
        t1 = clock()
        handle = contestant.lock(node)
        t2 = clock()
        contestant.insert(i)
        t3 = clock()
        contestant.unlock(handle)
        t4 = clock()
        excess = contestant.size() - capacity
        if excess > 0:
            contestant.evict(excess)
            per_call["evict"].append(clock() - t4)
        for name, dt in zip(CALLS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=False):
            per_call[name].append(dt)
    loop_ms = (clock() - t_loop) / 1e6
    out = {c: statistics.median(v) / 1000 for c, v in per_call.items() if v}
    out["loop_ms"] = loop_ms
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="folder holding the unpacked sglang package")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--capacity", type=int, default=8_000, help="tokens kept before evicting")
    args = ap.parse_args()
    sg = load_unified(args.root)
    reqs = workload(args.requests)
    makers = [lambda: Ours(sg, reqs), lambda: Classic(sg, reqs),
              lambda: Unified(sg, reqs, "python"), lambda: Unified(sg, reqs, "rust")]
    results: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for k in range(len(makers)):  # rotate who goes first
            contestant = makers[(r + k) % len(makers)]()
            results.setdefault(contestant.name, []).append(
                one_round(contestant, args.requests, args.capacity))
    table = {name: {key: statistics.median(x[key] for x in rounds) for key in rounds[0]}
             for name, rounds in results.items()}
    print(json.dumps({"requests": args.requests, "rounds": args.rounds,
                      "capacity": args.capacity, "medians": table}, indent=1))
    ours = table[Ours.name]
    keys = [*CALLS, "loop_ms"]
    print(f"\n{'median (us per call; loop in ms)':<40}" + "".join(f"{k:>10}" for k in keys))
    for name, row in table.items():
        print(f"{name:<40}" + "".join(f"{row.get(k, float('nan')):>10.1f}" for k in keys))
    print(f"\n{'time / ours (above 1: ours is faster)':<40}" + "".join(f"{k:>10}" for k in keys))
    for name, row in table.items():
        print(f"{name:<40}" + "".join(f"{row.get(k, 0) / ours[k]:>10.2f}" for k in keys))


if __name__ == "__main__":
    main()
