"""Op-trace replay at 5k .. 1M ops: parse, replay, and the invariant checks' share of the time.

A seeded workload in the op format of `python -m radix replay`: requests over 16 shared system
prompts (start, extend, unfinished, decode x 1-8, finished; up to 8 running), raw inserts,
matches and evictions, in a pool small enough to evict. Each size is parsed,
then replayed with the checks off, with the default cadence, and (up to --every-op-max ops) with
check_invariants after every op (main's cadence). --break-at F corrupts the cache at op F x size
(evictable_size_ + 1) to time how long narrowing the failure down to that op takes.
Prints JSON, then a table. Not part of the test run.
Usage: python benchmarks/op_replay.py [--sizes 5000,10000,100000,1000000] [--every-op-max N]
       [--break-at 0.9]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.runs import ops as run_ops  # noqa: E402
from radix.runs.ops import replay_ops  # noqa: E402
from radix.traces.limits import TraceLimits  # noqa: E402
from radix.traces.ops import parse_ops  # noqa: E402

# the 1M-op workload lists 46M tokens in 205 MB: past the default limits, which are for files
LIMITS = TraceLimits(max_total_tokens=1 << 30)


def make_ops(num_ops: int, seed: int = 0, capacity: int | None = None) -> str:
    """An op trace of exactly `num_ops` ops after its config line (JSON lines)."""
    rng = random.Random(seed)
    systems = [[rng.randrange(1000) for _ in range(rng.randrange(64, 257))] for _ in range(16)]
    config = {"op": "config", "page_size": 1, "policy": "lru"}
    lines = [config if capacity is None else {**config, "capacity": capacity}]
    running: dict[str, list[str]] = {}  # rid -> the ops it still has to run
    n = 0
    while len(lines) <= num_ops:
        roll = rng.random()
        if len(running) < 8 and (roll < 0.2 or (not running and roll < 0.6)):
            tail = [rng.randrange(1000) for _ in range(rng.randrange(8, 65))]
            prompt = rng.choice(systems) + tail
            rid = f"r{n}"
            n += 1
            lines.append({"op": "start", "rid": rid, "tokens": prompt})
            decodes = ["decode"] * rng.randrange(1, 9)
            running[rid] = ["extend", "unfinished", *decodes, "finished"]
        elif running and roll < 0.85:
            rid = rng.choice(list(running))
            op = running[rid].pop(0)
            row = {"op": op, "rid": rid}
            if op == "decode":
                row["token"] = rng.randrange(1000)
            lines.append(row)
            if not running[rid]:
                del running[rid]
        elif roll < 0.9:
            tail = [rng.randrange(1000) for _ in range(rng.randrange(0, 17))]
            lines.append({"op": "match", "tokens": rng.choice(systems) + tail})
        elif roll < 0.995:
            lines.append({"op": "insert",
                          "tokens": rng.choice(systems) + [rng.randrange(1000) for _ in range(16)]})
        else:
            lines.append({"op": "evict", "num_tokens": rng.randrange(1, 257)})
    return "\n".join(json.dumps(row, separators=(",", ":")) for row in lines[: num_ops + 1])


RUN = run_ops.OpRunner.run


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def break_at(index: int) -> None:
    """Make the op at `index` (and every replay of it) leave evictable_size_ one too high."""
    run = run_ops.OpRunner.run

    def broken(self, op):
        out = run(self, op)
        self._ops_run = getattr(self, "_ops_run", 0) + 1
        if self._ops_run == index + 1:
            self.cache.evictable_size_ += 1
        return out

    run_ops.OpRunner.run = broken


def measure(num_ops: int, every_op: bool, broken: float | None) -> dict:
    if broken is not None:
        run_ops.OpRunner.run = RUN
        break_at(int(num_ops * broken))
    text = make_ops(num_ops)
    t0 = time.perf_counter()
    trace = parse_ops(text, LIMITS)
    row = {"ops": num_ops, "bytes": len(text), "parse_s": round(time.perf_counter() - t0, 2)}
    runs = [("unchecked_s", {"check": False}), ("checked_s", {})]
    if every_op:
        runs.append(("every_op_s", {"check_every": 1}))
    for name, kwargs in runs:
        t0 = time.perf_counter()
        out = replay_ops(trace, **kwargs)
        row[name] = round(time.perf_counter() - t0, 2)
        if name == "checked_s":
            row["num_checks"] = out.num_checks
            row["num_nodes"] = len(out.cache.snapshot().nodes)
            row["first_bad_line"] = out.first_bad_line
        del out
    row["peak_rss_mb"] = round(peak_mb())
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,10000,100000,1000000")
    ap.add_argument("--every-op-max", type=int, default=10_000,
                    help="also time a check after every op up to this many ops")
    ap.add_argument("--break-at", type=float, default=None,
                    help="corrupt the cache at this fraction of the ops (times the narrowing)")
    args = ap.parse_args()
    rows = [measure(int(s), int(s) <= args.every_op_max, args.break_at)
            for s in args.sizes.split(",")]
    print(json.dumps({"rows": rows}, indent=1))
    print(f"\n{'ops':>10}{'MB':>7}{'parse s':>9}{'no check s':>12}{'default s':>11}"
          f"{'checks':>8}{'every op s':>12}{'nodes':>9}{'peak MB':>9}{'bad line':>10}")
    for r in rows:
        every = f"{r['every_op_s']:.2f}" if "every_op_s" in r else "-"
        print(f"{r['ops']:>10,}{r['bytes'] / 2**20:>7.1f}{r['parse_s']:>9.2f}"
              f"{r['unchecked_s']:>12.2f}{r['checked_s']:>11.2f}{r['num_checks']:>8,}"
              f"{every:>12}{r['num_nodes']:>9,}{r['peak_rss_mb']:>9,}"
              f"{r['first_bad_line'] or '-':>10}")


if __name__ == "__main__":
    main()
