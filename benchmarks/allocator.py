"""SlotAllocator's calls, this checkout against another, CPU seconds (not a test).

Three loops of the calls the request loops make, each with a fixed seed: (1) lists of ids,
page 1: alloc a row of 1-64 slots, free an older row (check on); (2) lists of ids, page 16: alloc,
alloc_extend the row by 1-20, free; (3) runs (compact requests): alloc, next_after 32 times
(decode steps in place), can_continue, free. Each round runs every loop once per checkout, in a
fresh subprocess, the order alternating round by round; prints the median CPU seconds per
checkout and the median (lowest-highest) of the per-round ratios this / other.

    python benchmarks/allocator.py OTHER_ROOT [--rounds 5] [--ops 200000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CODE = r"""
import json, random, sys, time
sys.path.insert(0, ".")
from radix.request import SlotAllocator
ops, out = %d, {}

def lists(page):
    rng, a, rows = random.Random(1), SlotAllocator(1 << 20, page_size=page), []
    t0 = time.process_time()
    for _ in range(ops):
        row = a.alloc(rng.randint(1, 64))
        if page > 1:
            row += a.alloc_extend(row[-1], rng.randint(1, 20))
        rows.append(row)
        if len(rows) > 64:
            a.free(rows.pop(rng.randrange(len(rows))))
    return time.process_time() - t0

def runs():
    rng, a, rows = random.Random(1), SlotAllocator(1 << 20, runs=True), []
    t0 = time.process_time()
    for _ in range(ops // 8):
        row = a.alloc(rng.randint(1, 64))
        last = row[-1]
        for _ in range(32):
            last = a.next_after(last)
        a.can_continue(last, 1)
        rows.append(row + type(row)([(row[-1] + 1, 32)]))
        if len(rows) > 64:
            a.free(rows.pop(rng.randrange(len(rows))))
    return time.process_time() - t0

out["lists page 1"], out["lists page 16"], out["runs"] = lists(1), lists(16), runs()
print(json.dumps(out))
"""


def one(root: Path, ops: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CODE % ops], cwd=root, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200_000)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    this: list[dict] = []
    other: list[dict] = []
    for r in range(args.rounds):
        pair = [(this, here), (other, args.other)]
        for figures, root in (pair if r % 2 == 0 else pair[::-1]):
            figures.append(one(root, args.ops))
    out = {}
    for name in this[0]:
        ratios = sorted(t[name] / o[name] for t, o in zip(this, other))
        out[name] = {"this": round(statistics.median(t[name] for t in this), 3),
                     "other": round(statistics.median(o[name] for o in other), 3),
                     "ratio": f"{statistics.median(ratios):.2f} "
                              f"({ratios[0]:.2f}-{ratios[-1]:.2f})"}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
