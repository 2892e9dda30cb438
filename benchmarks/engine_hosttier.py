"""Engine host tier: TTFT of a host hit (rows loaded back from the CPU host pool) against a
cold prefill and a device hit, on the real model (engine/hosttier.py).

Each round, on a fresh engine (device pool 1.5 x N + 8 tokens, host ratio 2, write-through):
P (N tokens, cold), P again (device hit of N - 1), F (N other tokens: demotes P to host), P a
third time (host hit: N - 1 tokens loaded back, 1 prefilled). Two output tokens each, so TTFT
(admission, load back, prefill) ends before the insert's backup. Every round runs the three
kinds in turn; medians and ratios are printed, with the load's copy time and its bandwidth, and the
greedy tokens of the three are compared. Not part of the test run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/engine_hosttier.py --tokens 1024 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.hosttier import build_host_tier  # noqa: E402
from engine.kv_pool import KVPool  # noqa: E402
from engine.model import load_model  # noqa: E402
from engine.runner import ModelRunner  # noqa: E402
from radix.request import Req  # noqa: E402


def one_round(loaded, n: int, seed: int) -> dict:
    rng = random.Random(seed)
    vocab = loaded.model.config.vocab_size
    p = [rng.randrange(100, vocab) for _ in range(n)]
    f = [rng.randrange(100, vocab) for _ in range(n)]
    pool = KVPool.for_model(loaded.model.config, n + n // 2 + 8, loaded.dtype, loaded.device)
    sched = build_host_tier(pool, ModelRunner(loaded.model, pool), 2.0)
    out = {}
    for rid, prompt in (("cold", p), ("device", p), ("filler", f), ("host", p)):
        req = Req(rid, list(prompt), max_new_tokens=2, arrival=sched.clock())
        sched.add_request(req)
        while sched.has_work:
            sched.step()
        out[rid] = req
    host = out["host"].metrics
    assert out["device"].metrics["device_hit_tokens"] == n - 1
    assert host["host_hit_tokens"] == n - 1 and host["prefilled_tokens"] == 1
    same = out["cold"].output_ids == out["device"].output_ids == out["host"].output_ids
    return {"cold_ms": out["cold"].metrics["ttft"] * 1e3,
            "device_ms": out["device"].metrics["ttft"] * 1e3,
            "host_ms": host["ttft"] * 1e3, "load_ms": host["load_back_s"] * 1e3,
            "backup_ms": sched.copier.backup_s * 1e3, "same_tokens": same,
            "load_gb_s": (n - 1) * pool.bytes_per_token / host["load_back_s"] / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024, help="prompt length N")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    loaded = load_model(device=args.device)
    one_round(loaded, 64, 99)  # warm-up
    rounds = [one_round(loaded, args.tokens, r) for r in range(args.rounds)]
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("cold_ms", "device_ms", "host_ms", "load_ms", "backup_ms", "load_gb_s")}
    print(f"{loaded.label}, torch threads "
          f"{torch.get_num_threads()}, prompt {args.tokens:,} tokens, {args.rounds} rounds "
          f"(medians):")
    print(f"  TTFT cold prefill      {med['cold_ms']:9.1f} ms")
    print(f"  TTFT device hit        {med['device_ms']:9.1f} ms")
    print(f"  TTFT host hit          {med['host_ms']:9.1f} ms  (load back {med['load_ms']:.1f} "
          f"ms, {med['load_gb_s']:.2f} GB/s)")
    print(f"  host hit / cold        {med['host_ms'] / med['cold_ms']:9.3f}")
    print(f"  host hit / device hit  {med['host_ms'] / med['device_ms']:9.3f}")
    print(f"  greedy tokens equal in every round: {all(r['same_tokens'] for r in rounds)}")
    print(json.dumps({"tokens": args.tokens, "medians": med, "rounds": rounds}))


if __name__ == "__main__":
    main()
