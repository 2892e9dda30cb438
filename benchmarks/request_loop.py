"""Our RadixCache against SGLang's own, in one process: per call and the whole request loop.

Workload (a customer-support agent): a 512 + 1,543 = 2,055-token shared prefix,
300 users in growing conversations, 20,000 requests, KV capacity 100,000 tokens so eviction
fires. Each request, on both sides: build the key, match_prefix, inc_lock_ref, evict the
shortfall when the pool is short, allocate the new slots, insert prompt + reply, free the
duplicate slots, dec_lock_ref. SGLang's side is its real radix_cache.py (0.5.23, from the
unpacked wheel) with its real TokenToKVPoolAllocator (torch tensors); ours is radix/ with
SlotAllocator. Both allocators give back the evicted slots, so evict is timed with its freeing.
"slots" is joining the prefix's slots with the new ones (SGLang: path_device_indices + cat; ours:
MatchResult.slot_ids + list). Rounds interleave (ours, SGLang, ours, ...); medians of per-round
figures are reported, with the lowest and highest round's ratio (SGLang / ours, same round).

    python benchmarks/request_loop.py /tmp/sgl/ex [--requests 20000] [--rounds 5]
Without the wheel it measures ours alone and says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.request import SlotAllocator  # noqa: E402
from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

CALLS = ("key", "match_prefix", "inc_lock_ref", "evict", "alloc", "slots", "insert", "free",
         "dec_lock_ref")


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


def load_sglang(root: Path):
    """(radix_cache module, base_prefix_cache module, params module, allocator class)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from diff_sglang import load_sglang as load_tree

    radix, base, params = load_tree(root)
    src = root / "sglang" / "srt" / "mem_cache" / "allocator"
    for name in ("base", "token"):  # the real allocator files over the tree loader's stub
        full = f"sglang.srt.mem_cache.allocator.{name}"
        spec = importlib.util.spec_from_file_location(full, src / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return radix, base, params, sys.modules["sglang.srt.mem_cache.allocator.token"]


def requests(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    work = Workload(300, seed)
    return [work.next_request() for _ in range(n)]


class Clock:
    """Per-call nanoseconds, summed per call name."""

    def __init__(self) -> None:
        self.ns = dict.fromkeys(CALLS, 0)
        self.samples: dict[str, list[int]] = {c: [] for c in CALLS}

    def add(self, name: str, t0: int) -> int:
        t1 = time.perf_counter_ns()
        self.ns[name] += t1 - t0
        self.samples[name].append(t1 - t0)
        return t1


def run_ours(reqs, page: int, capacity: int) -> tuple[float, Clock, int]:
    alloc = SlotAllocator(capacity, check=False)
    cache = RadixCache(page_size=page, allocator=alloc, flavor="classic")  # races the classic class
    c, now, hit = Clock(), time.perf_counter_ns, 0
    start = now()
    for prompt, reply in reqs:
        t = now()
        key = RadixKey(prompt)
        t = c.add("key", t)
        m = cache.match_prefix(key)
        t = c.add("match_prefix", t)
        cache.inc_lock_ref(m.last_node)
        t = c.add("inc_lock_ref", t)
        need = len(prompt) + len(reply) - m.prefix_len
        short = need - alloc.available_size()
        if short > 0:
            t = now()
            cache.evict(short)
            t = c.add("evict", t)
        new = alloc.alloc(need)
        t = c.add("alloc", t)
        slots = m.slot_ids + new
        t = c.add("slots", t)
        full = RadixKey(prompt + reply)
        t = c.add("key", t)
        aligned = len(slots) // page * page
        r = cache.insert(full, slots)
        t = c.add("insert", t)
        alloc.free(slots[m.prefix_len : r.prefix_len] + slots[aligned:])
        t = c.add("free", t)
        cache.dec_lock_ref(m.last_node)
        c.add("dec_lock_ref", t)
        hit += m.prefix_len
    return (now() - start) / 1e9, c, hit


def run_sglang(sg, reqs, page: int, capacity: int) -> tuple[float, Clock, int]:
    radix, base, params, token = sg
    import torch

    alloc = token.TokenToKVPoolAllocator(capacity, torch.int64, "cpu", None, need_sort=False)
    cache = radix.RadixCache(params.CacheInitParams(
        disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc,
        page_size=page, eviction_policy="lru"))
    c, now, hit = Clock(), time.perf_counter_ns, 0
    start = now()
    for prompt, reply in reqs:
        t = now()
        key = radix.RadixKey(array("q", prompt))
        t = c.add("key", t)
        m = cache.match_prefix(base.MatchPrefixParams(key=key))
        node, prefix_len = m.last_device_node, m.device_prefix_len
        t = c.add("match_prefix", t)
        cache.inc_lock_ref(node)
        t = c.add("inc_lock_ref", t)
        need = len(prompt) + len(reply) - prefix_len
        short = need - alloc.available_size()
        if short > 0:
            t = now()
            cache.evict(base.EvictParams(num_tokens=short))
            t = c.add("evict", t)
        new = alloc.alloc(need)
        t = c.add("alloc", t)
        slots = torch.cat((cache.path_device_indices(node), new))
        t = c.add("slots", t)
        full = radix.RadixKey(array("q", prompt + reply))
        t = c.add("key", t)
        aligned = len(slots) // page * page
        r = cache.insert(base.InsertParams(key=full, value=slots))
        t = c.add("insert", t)
        alloc.free(torch.cat((slots[prefix_len : r.prefix_len], slots[aligned:])))
        t = c.add("free", t)
        cache.dec_lock_ref(node)
        c.add("dec_lock_ref", t)
        hit += prefix_len
    return (now() - start) / 1e9, c, hit


def p50_us(clock: Clock, name: str) -> float | None:
    s = clock.samples[name]
    return statistics.median(s) / 1000 if s else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sglang_root", type=Path, nargs="?", help="the unpacked SGLang wheel")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--capacity", type=int, default=100_000)
    args = ap.parse_args()
    sg = None
    if args.sglang_root and (args.sglang_root / "sglang").is_dir():
        sg = load_sglang(args.sglang_root)
    else:
        print("note: no SGLang wheel given (or not found): measuring ours alone", file=sys.stderr)
    reqs = requests(args.requests)
    out = {"requests": args.requests, "capacity": args.capacity, "rounds": args.rounds,
           "sglang": sg is not None, "pages": {}}
    for page in (1, 16):
        rounds = {"ours": [], "sglang": []}
        for _ in range(args.rounds):
            rounds["ours"].append(run_ours(reqs, page, args.capacity))
            if sg is not None:
                rounds["sglang"].append(run_sglang(sg, reqs, page, args.capacity))
        if sg is not None:
            assert rounds["ours"][0][2] == rounds["sglang"][0][2], "hit tokens differ"
        res = {}
        for side, rs in rounds.items():
            if not rs:
                continue
            res[side] = {
                "loop_s": statistics.median(r[0] for r in rs),
                "hit_tokens": rs[0][2],
                "p50_us": {n: statistics.median(p50_us(r[1], n) or 0 for r in rs)
                           for n in CALLS},
                "total_s": {n: statistics.median(r[1].ns[n] / 1e9 for r in rs) for n in CALLS},
            }
        if sg is not None:  # each round's ratio (the same round's SGLang / ours): the spread
            res["round_ratios"] = {n: [(p50_us(t[1], n) or 0) / (p50_us(o[1], n) or 1)
                                       for o, t in zip(rounds["ours"], rounds["sglang"])]
                                   for n in CALLS}
            res["round_ratios"]["loop"] = [t[0] / o[0] for o, t in
                                           zip(rounds["ours"], rounds["sglang"])]
        out["pages"][page] = res
    print(json.dumps(out, indent=1))
    _table(out)


def _table(out: dict) -> None:
    for page, res in out["pages"].items():
        ours, sgl = res["ours"], res.get("sglang")
        line = f"\npage {page}: whole loop {ours['loop_s']:.2f} s ours"
        if sgl:
            ratio = sgl["loop_s"] / ours["loop_s"]
            line += f", {sgl['loop_s']:.2f} s SGLang, SGLang/ours {ratio:.2f}x"
        print(line)
        spread = res.get("round_ratios", {})
        if spread:
            print(f"rounds: SGLang/ours {min(spread['loop']):.2f}-{max(spread['loop']):.2f}x")
        print(f"{'call':<14}{'ours p50 us':>12}{'SGLang p50':>12}{'ratio':>8}{'rounds':>12}"
              f"{'ours total s':>14}{'SGLang total':>14}")
        for n in CALLS:
            a = ours["p50_us"][n]
            b = sgl["p50_us"][n] if sgl else None
            ratio = f"{b / a:.2f}" if b and a else "-"
            tb = f"{sgl['total_s'][n]:.3f}" if sgl else "-"
            rs = f"{min(spread[n]):.2f}-{max(spread[n]):.2f}" if spread else "-"
            print(f"{n:<14}{a:>12.2f}{(b if b is not None else float('nan')):>12.2f}{ratio:>8}"
                  f"{rs:>12}{ours['total_s'][n]:>14.3f}{tb:>14}")


if __name__ == "__main__":
    main()
