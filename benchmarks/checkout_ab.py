"""Two checkouts side by side: the request loop and the Trace debugger's scrub, CPU seconds.

For a refactor that must not slow anything down (issue #23): each round runs, in a fresh
subprocess per checkout (the order alternating round by round), (1) the request loop of
benchmarks/request_loop.py (ours only, classic flavor, 100,000-slot pool) at pages 1 and 16,
(2) `scenarios.trace.replay` of the Mooncake excerpt, then `EventLog.snapshot_at` at every
7th step (the Trace debugger's scrub), and (3) the scheduler over a RadixCache
(`radix.runs.sim.simulate`): 1,500 requests on 20 shared 1,000-token prefixes with 40-400
output tokens, a 60,000-token pool (eviction, retraction), step by step and fast-forwarded.
Prints each figure's median per checkout and the median (lowest-highest) of the per-round
ratios this / other. CPU time, not wall time: the shared machine's load moves wall time by
several times.

    python benchmarks/checkout_ab.py OTHER_ROOT [--rounds 6] [--requests 6000]
(OTHER_ROOT: a checkout to compare with, e.g. `git archive main | tar -x -C /tmp/main`.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CODE = r"""
import json, sys, time
sys.path.insert(0, ".")
sys.argv = ["x"]
import benchmarks.request_loop as loop
from scenarios.trace import replay
out, reqs = {}, loop.requests(%d)
for page in (1, 16):
    t0 = time.process_time()
    loop.run_ours(reqs, page, 100_000)
    out[f"loop page {page}"] = time.process_time() - t0
data = open("examples/traces/mooncake_excerpt.jsonl", "rb").read()
t0 = time.process_time()
r = replay(data, "mooncake_excerpt.jsonl")
t1 = time.process_time()
for step in range(0, r.log.num_steps + 1, 7):
    r.log.snapshot_at(step)
out["trace replay"], out["scrub every 7th step"] = t1 - t0, time.process_time() - t1
import random
from radix.runs.sim import SimConfig, simulate
from radix.traces.trace import Trace, TraceRequest
rng = random.Random(7)
stems = [[rng.randrange(50_000) for _ in range(1000)] for _ in range(20)]
trace = Trace("request", [TraceRequest(f"q{i}", i * 0.02, rng.choice(stems)
                                       + [rng.randrange(50_000) for _ in range(100)],
                                       rng.randrange(40, 400)) for i in range(1500)])
for label, ff in (("scheduler step by step", False), ("scheduler fast-forward", True)):
    t0 = time.process_time()
    simulate(trace, SimConfig(capacity=60_000, fast_forward=ff, shadow=False))
    out[label] = time.process_time() - t0
print(json.dumps(out))
"""


def one(root: Path, requests: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CODE % requests], cwd=root, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", type=Path, help="the checkout to compare with")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=6000)
    args = ap.parse_args()
    roots = {"this": Path(__file__).resolve().parents[1], "other": args.other.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        for name in (("this", "other") if r % 2 == 0 else ("other", "this")):
            runs[name].append(one(roots[name], args.requests))
    for key in runs["this"][0]:
        this = [x[key] for x in runs["this"]]
        other = [x[key] for x in runs["other"]]
        ratios = [a / b for a, b in zip(this, other, strict=True)]
        print(f"{key:22s} this {statistics.median(this):7.3f} CPU-s  other "
              f"{statistics.median(other):7.3f}  this/other {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
