"""Our block cache against vLLM 0.33's own, in one process: per request hashing, lookup,
allocate and free.

Workload: 20,000 requests, 4,096 blocks of 16 tokens, 16 running at
once (the oldest is freed when a 17th starts); a prompt = one of 16 system prompts (1,024
tokens) + one of 256 shared contexts (512-1,024) + its own 200-600 tokens, ~137 blocks.
vLLM's side is its real kv_cache_utils.py (the request block hasher, sha256 over pickle),
block_pool.py and single_type_kv_cache_manager.py (FullAttentionManager), glued as
KVCacheManager glues them (tools/diff_vllm.py's VSide), events off; ours is BlockCacheManager
(sha256 over msgpack), no sink. Rounds interleave; medians of per-round p50s are reported,
with the lowest and highest round's ratio (vLLM / ours in the same round) beside them.

    python benchmarks/block_loop.py /tmp/vllm/ex [--requests 20000] [--rounds 3]
Without the wheel it measures ours alone and says so.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.blocks.manager import BlockCacheManager  # noqa: E402
from radix.blocks.pool import BlockPool  # noqa: E402
from radix.request import Req  # noqa: E402

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


def run_ours(prompts: list[list[int]], num_blocks: int, running: int) -> dict[str, list[int]]:
    m = BlockCacheManager(BlockPool(num_blocks, block_size=16))
    times = {op: [] for op in OPS}
    live: list[Req] = []
    now = time.perf_counter_ns
    for i, tokens in enumerate(prompts):
        req = Req(f"r{i}", tokens)
        if len(live) == running:
            t0 = now()
            m.free(live.pop(0))
            times["free"].append(now() - t0)
        t0 = now()
        m.hash_request(req)
        t1 = now()
        hit = m.get_computed_blocks(req)
        t2 = now()
        blocks = m.allocate_slots(req, len(tokens) - hit.num_computed_tokens, hit)
        t3 = now()
        assert blocks is not None, "pool too small for the running set"
        times["hashing"].append(t1 - t0)
        times["lookup"].append(t2 - t1)
        times["allocate"].append(t3 - t2)
        live.append(req)
    return times


def run_vllm(v, prompts: list[list[int]], num_blocks: int, running: int) -> dict[str, list[int]]:
    from diff_vllm import VReq, VSide

    side = VSide(v, num_blocks, 16, True)
    side.pool.enable_kv_cache_events = False  # ours runs without a sink
    times = {op: [] for op in OPS}
    live: list[str] = []
    now = time.perf_counter_ns
    for i, tokens in enumerate(prompts):
        rid = f"r{i}"
        if len(live) == running:
            t0 = now()
            side.free(live.pop(0))
            times["free"].append(now() - t0)
        t0 = now()
        req = VReq(side.hasher, rid, tokens, None, None)  # Request.__init__ hashes every block
        t1 = now()
        hits, hit_len = side.lookup(req)
        t2 = now()
        blocks = side.allocate(req, len(tokens) - hit_len, hits, hit_len)
        t3 = now()
        assert blocks is not None, "pool too small for the running set"
        times["hashing"].append(t1 - t0)
        times["lookup"].append(t2 - t1)
        times["allocate"].append(t3 - t2)
        live.append(rid)
    return times


def p50_us(times: dict[str, list[int]]) -> dict[str, float]:
    return {op: statistics.median(t) / 1000 for op, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vllm_root", type=Path, nargs="?", help="the unpacked vLLM wheel")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    v = None
    if args.vllm_root and (args.vllm_root / "vllm").is_dir():
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
        from diff_vllm import load_vllm

        v = load_vllm(args.vllm_root)
    else:
        print("note: no vLLM wheel given (or not found): measuring ours alone", file=sys.stderr)
    prompts = [r.origin_input_ids for r in make_requests(args.requests, 0)]
    rounds: dict[str, list[dict[str, float]]] = {"ours": [], "vllm": []}
    gc.disable()
    for _ in range(args.rounds):
        rounds["ours"].append(p50_us(run_ours(prompts, 4096, 16)))
        if v is not None:
            rounds["vllm"].append(p50_us(run_vllm(v, prompts, 4096, 16)))
        gc.collect()
    gc.enable()
    out = {"requests": args.requests, "rounds": args.rounds, "vllm": v is not None,
           "p50_us": {side: {op: statistics.median(r[op] for r in rs) for op in OPS}
                      for side, rs in rounds.items() if rs}}
    if v is not None:  # each round's ratio (the same round's vLLM / ours): the spread
        out["round_ratios"] = {op: [t[op] / o[op] for o, t in zip(rounds["ours"], rounds["vllm"])]
                               for op in OPS}
    print(json.dumps(out, indent=1))
    ours, theirs = out["p50_us"]["ours"], out["p50_us"].get("vllm")
    print(f"\n{'op':<10}{'ours p50 us':>12}{'vLLM p50 us':>12}{'vLLM/ours':>10}{'rounds':>14}")
    for op in OPS:
        b = theirs[op] if theirs else float("nan")
        spread = out.get("round_ratios", {}).get(op) or [float("nan")]
        print(f"{op:<10}{ours[op]:>12.1f}{b:>12.1f}{b / ours[op]:>10.2f}"
              f"{f'{min(spread):.2f}-{max(spread):.2f}':>14}")


if __name__ == "__main__":
    main()
