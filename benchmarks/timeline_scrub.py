"""Scrubbing a long tree event log: the time of one Timeline frame at 10,000+ steps.

Builds the log tests/viz/test_viz.py scrubs (inserts of keys sharing prefixes, matches, an evict
every 50 inserts, a keyframe every 64 steps), then times `Timeline.frame` at random steps and at the
worst case (the last micro-event of the step just before a keyframe: 63 steps of replay). The
target (issue 13): under a second per move. The test checks the bound that makes it so (steps
replayed per frame <= keyframe_every); this script measures the time. Prints JSON, then a table.
Usage: python benchmarks/timeline_scrub.py [--steps 10000] [--keyframe-every 64] [--moves 200]
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

from radix.tree.radix_cache import RadixCache  # noqa: E402
from radix.tree.replay import EventLog  # noqa: E402
from viz.timeline import Timeline  # noqa: E402


def build_log(num_steps: int, keyframe_every: int) -> EventLog:
    """At least `num_steps` steps: insert, match, and every 50th round an evict(40)."""
    log = EventLog(keyframe_every=keyframe_every)
    c = RadixCache(sink=log)
    i = 0
    while log.num_steps < num_steps:
        c.insert([i % 7, i % 13, i % 200, i])
        c.match_prefix([i % 7, i % 13])
        if i % 50 == 49:
            c.evict(40)
        i += 1
    return log


def time_frames(tl: Timeline, steps: list[int]) -> list[float]:
    """Seconds per frame, each at the step's last micro-event."""
    out = []
    for step in steps:
        started = time.perf_counter()
        tl.frame(step, tl.num_micro(step))
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--keyframe-every", type=int, default=64)
    ap.add_argument("--moves", type=int, default=200)
    args = ap.parse_args()
    started = time.perf_counter()
    log = build_log(args.steps, args.keyframe_every)
    built = time.perf_counter() - started
    tl = Timeline(log)
    rng = random.Random(0)
    k = args.keyframe_every
    worst = [s for s in range(k - 1, log.num_steps, k)]
    rows = {"random": time_frames(tl, [rng.randrange(log.num_steps) for _ in range(args.moves)]),
            "before a keyframe": time_frames(tl, rng.sample(worst, min(args.moves, len(worst))))}
    out = {"steps": log.num_steps, "keyframe_every": k, "build_s": round(built, 3),
           **{name: {"moves": len(t), "median_ms": round(1e3 * statistics.median(t), 2),
                     "max_ms": round(1e3 * max(t), 2)} for name, t in rows.items()}}
    print(json.dumps(out))
    print(f"{'moves':<20}{'n':>6}{'median ms':>12}{'max ms':>10}")
    for name, t in rows.items():
        print(f"{name:<20}{len(t):>6}{1e3 * statistics.median(t):>12.2f}{1e3 * max(t):>10.2f}")


if __name__ == "__main__":
    main()
