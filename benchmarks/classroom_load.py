"""A classroom under load: N student threads in R rooms, each asking P prompts in turn.

Runs scenarios/classload.py's simulated class (each student polls its room every 0.5 s, the
page's refresh) on the simulated engine (default) or the real default model (--model), twice
over, and prints JSON then a table: prompts asked and answered, the change -> seen latency
percentiles, wall time, engine threads left, and the process's resident memory after each class
(the second class should leave it no bigger than the first).
Usage: python benchmarks/classroom_load.py [--students 30] [--rooms 3] [--prompts 3] [--model]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios.classload import simulate_class  # noqa: E402
from scenarios.classroom import model_sessions, sim_sessions  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def engines() -> int:
    return sum(t.name in ("radixlens-sim", "radixlens-engine") for t in threading.enumerate())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--rooms", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between a student's polls")
    ap.add_argument("--model", action="store_true", help="the real default model (CPU)")
    args = ap.parse_args()
    if args.model:
        from engine.model import load_model

        make = model_sessions(load_model())
    else:
        make = sim_sessions(step_s=0.01)
    out = []
    for run in (1, 2):
        r = simulate_class(make, args.students, args.rooms, args.prompts, args.poll,
                           timeout_s=900)
        out.append({"run": run, "engine": "model" if args.model else "sim",
                    "students": r.students, "rooms": r.rooms, "asked": r.asked,
                    "answered": r.answered, "failed": len(r.failed), "foreign": len(r.foreign),
                    "changes_seen": len(r.latencies),
                    "latency_p50_s": round(r.percentile(50), 3),
                    "latency_p95_s": round(r.percentile(95), 3),
                    "latency_max_s": round(r.percentile(100), 3),
                    "seconds": round(r.seconds, 2), "engine_threads_left": engines(),
                    "rss_mib": round(rss_mib(), 1)})
    print(json.dumps(out, indent=1))
    keys = list(out[0])
    print(" | ".join(keys))
    for row in out:
        print(" | ".join(str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
