"""Sliding-window layers on the engine: what the SWA pool costs a decode step, and what the
per-family layer steps (engine/arch.py) cost a Llama model. CPU seconds per decode step, medians.

1. The tiny Gemma 3 (examples/configs/tiny_gemma3.json, window 8), B requests of a P-token prompt
   decoding S steps together: sliding layers on the SWA pool (rows apart, found through the
   full -> SWA mapping every step) vs one pool (the full layers' rows); both gather only the
   window's rows. Rounds interleaved in one process; the greedy tokens of both are compared.
2. With `--other ROOT` (a checkout without engine/arch.py, e.g. `git archive main | tar -x -C
   /tmp/main`): the tiny Llama (examples/configs/tiny_llama.json) decoding the same way, each
   round in a fresh subprocess per checkout, the order alternating.

    python benchmarks/engine_hybrid.py [--batch 8] [--prompt 1024] [--steps 32] [--rounds 5]
                                       [--other ROOT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]

DECODE = r"""
import json, sys, time, torch
sys.path.insert(0, ".")
from engine.model import load_model
from engine.kv_pool import KVPool
from engine.runner import ModelRunner
from radix.request import Req
loaded = load_model(random_init=CONFIG, device="cpu")

def decode_seconds(pool):
    runner = ModelRunner(loaded.model, pool)
    reqs = []
    for b in range(BATCH):
        req = Req(f"r{b}", [(b * 7919 + i * 104729) % 40000 + 10 for i in range(PROMPT)],
                  max_new_tokens=STEPS + 1)
        req.fill_ids, req.slot_ids = list(req.origin_input_ids), pool.alloc(PROMPT)
        reqs.append(req)
    out = runner.extend(reqs, [0] * BATCH)
    for r, t in zip(reqs, out.next_token_ids):
        r.output_ids.append(t)
    start = time.process_time()
    for _ in range(STEPS):
        for r in reqs:
            r.slot_ids += pool.alloc(1)
        out = runner.decode(reqs)
        for r, t in zip(reqs, out.next_token_ids):
            r.output_ids.append(t)
    return (time.process_time() - start) / STEPS, [r.output_ids for r in reqs]
"""


def run_code(root: Path, code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def header(config: str, args: argparse.Namespace) -> str:
    return (DECODE.replace("CONFIG", repr(config)).replace("BATCH", str(args.batch))
            .replace("PROMPT", str(args.prompt)).replace("STEPS", str(args.steps)))


def swa_vs_one_pool(args: argparse.Namespace) -> dict:
    size = args.batch * (args.prompt + args.steps + 2)
    code = header("examples/configs/tiny_gemma3.json", args) + f"""
from engine.swa_pool import SWAKVPool
res = {{"swa_pool": [], "one_pool": [], "same_tokens": True}}
for _ in range({args.rounds}):
    a, ta = decode_seconds(SWAKVPool.for_model(loaded.model.config, {size}, torch.float32, "cpu"))
    b, tb = decode_seconds(KVPool.for_model(loaded.model.config, {size}, torch.float32, "cpu"))
    res["swa_pool"].append(a); res["one_pool"].append(b); res["same_tokens"] &= ta == tb
print(json.dumps(res))
"""
    return run_code(ROOT, code)


def llama_ab(args: argparse.Namespace, other: Path) -> dict:
    size = args.batch * (args.prompt + args.steps + 2)
    code = header("examples/configs/tiny_llama.json", args) + f"""
s, _ = decode_seconds(KVPool.for_model(loaded.model.config, {size}, torch.float32, "cpu"))
print(json.dumps({{"seconds": s}}))
"""
    res: dict = {"this": [], "other": []}
    for k in range(args.rounds):
        order = [("this", ROOT), ("other", other)]
        for name, root in order if k % 2 == 0 else order[::-1]:
            res[name].append(run_code(root, code)["seconds"])
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=1024)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--other", type=Path, default=None)
    args = p.parse_args()
    out = {"args": vars(args) | {"other": str(args.other) if args.other else None}}
    gemma = swa_vs_one_pool(args)
    a, b = statistics.median(gemma["swa_pool"]), statistics.median(gemma["one_pool"])
    out["gemma3"] = gemma
    print(f"tiny Gemma 3, {args.batch} x {args.prompt}-token prompts, {args.steps} decode steps, "
          f"{args.rounds} rounds: CPU ms per step, median: SWA pool {a * 1e3:.2f}, one pool "
          f"{b * 1e3:.2f} ({b / a:.2f}x); same tokens: {gemma['same_tokens']}")
    if args.other is not None:
        ab = llama_ab(args, args.other)
        out["llama"] = ab
        this, other = statistics.median(ab["this"]), statistics.median(ab["other"])
        print(f"tiny Llama, same sizes: CPU ms per step, median: this checkout "
              f"{this * 1e3:.2f}, {args.other} {other * 1e3:.2f} ({this / other:.2f}x)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
