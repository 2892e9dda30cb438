"""Benchmark: `radix sweep`'s wall time serial, on Ray with 1 worker and with 2, interleaved.

One process, one grid (replicas x routers) over the first `--requests` requests of a trace.
Each round runs the three contestants in a rotating order: serial (`sweep_serial`), then Ray
with `num_cpus` 1 and 2 (`start_ray` + `sweep_ray`, shut down after). Ray's time is split in
two: `start` (ray.init and one warm-up task per worker, so each worker process exists) and
`run` (the sweep itself: put the trace, one task per cell, gather); `total` is both. Printed:
medians over rounds, the speed-ups of 2 workers over 1 and over serial, and what 2 workers
could at best give on these cells: Ray hands tasks out in grid order to whichever worker is
free, so with the serial run's per-cell times the best 2-worker run is that greedy schedule's
makespan (no overhead, no other load). Every Ray run's rows are checked byte-identical to the
serial rows. The load average and the CPUs this process may use are printed: on a 2-core
machine shared with other work, two workers share what is left, and the figure says so.

    python benchmarks/sweep_workers.py --rounds 3 --requests 1500
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.cluster.sweep import (  # noqa: E402
    Grid,
    grid_cells,
    run_cell,
    start_ray,
    sweep_ray,
    to_jsonl,
)
from radix.traces import Trace, load_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples/traces/mooncake_synthetic_trace.jsonl.gz"
ROUTERS = ("round-robin", "cache-aware", "kv-overlap", "prefix-affinity")


def serial(trace: Trace, cells: list[dict]) -> tuple[str, list[float], float]:
    """The rows, each cell's wall time, the total."""
    rows, times = [], []
    start = time.perf_counter()
    for cell in cells:
        t = time.perf_counter()
        rows.append(run_cell(trace, cell))
        times.append(time.perf_counter() - t)
    return to_jsonl(rows), times, time.perf_counter() - start


def on_ray(trace: Trace, cells: list[dict], workers: int) -> tuple[str, float, float]:
    """The rows, Ray's start-up (init + a warm-up task on each worker), the sweep's run."""
    import ray

    t0 = time.perf_counter()
    start_ray(num_cpus=workers)
    try:
        nap = ray.remote(num_cpus=1)(_nap)
        ray.get([nap.remote(0.5) for _ in range(workers)])  # both at once: both workers up
        t1 = time.perf_counter()
        rows = to_jsonl(sweep_ray(trace, cells))
        t2 = time.perf_counter()
    finally:
        ray.shutdown()
    return rows, t1 - t0 - 0.5, t2 - t1  # the warm-up's own 0.5 s nap is not start-up


def _nap(seconds: float) -> None:
    time.sleep(seconds)


def greedy_makespan(times: list[float], workers: int) -> float:
    """Tasks in order, each to the worker free first: Ray's dispatch with no overhead.

    >>> greedy_makespan([3.0, 1.0, 1.0, 1.0], 2)
    3.0
    """
    free = [0.0] * workers
    for t in times:
        k = free.index(min(free))
        free[k] += t
    return max(free)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--requests", type=int, default=1500, help="the trace's first N requests")
    ap.add_argument("--replicas", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    full = load_trace(args.trace)
    trace = Trace(full.format, full.requests[:args.requests], source=full.source)
    cells = grid_cells(Grid(replicas=tuple(int(x) for x in args.replicas.split(",")),
                            router=ROUTERS))
    print(f"{len(cells)} cells x {len(trace.requests)} requests of {Path(args.trace).name}; "
          f"CPUs usable here: {len(os.sched_getaffinity(0))}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    got: dict[str, list[float]] = {}
    cell_times: list[list[float]] = []
    want = None
    contestants = ["serial", "ray-1", "ray-2"]
    for r in range(args.rounds):
        order = contestants[r % 3:] + contestants[:r % 3]
        for name in order:
            if name == "serial":
                rows, times, total = serial(trace, cells)
                cell_times.append(times)
                got.setdefault("serial total", []).append(total)
            else:
                rows, up, run = on_ray(trace, cells, int(name[-1]))
                got.setdefault(f"{name} start", []).append(up)
                got.setdefault(f"{name} run", []).append(run)
                got.setdefault(f"{name} total", []).append(up + run)
            want = want or rows
            assert rows == want, f"round {r + 1}: {name}'s rows differ from the first run's"
        print(f"round {r + 1} ({', '.join(order)}): "
              + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in got.items()), flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    per_cell = [statistics.median(c) for c in zip(*cell_times, strict=True)]
    best = greedy_makespan(per_cell, 2)
    print(f"medians over {args.rounds} rounds (s): "
          + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print(f"2 workers vs 1: run {med['ray-1 run'] / med['ray-2 run']:.2f}x, with start-up "
          f"{med['ray-1 total'] / med['ray-2 total']:.2f}x; vs serial: run "
          f"{med['serial total'] / med['ray-2 run']:.2f}x, with start-up "
          f"{med['serial total'] / med['ray-2 total']:.2f}x")
    print(f"best 2 workers could do on these cells (greedy in grid order, serial cell times, "
          f"no overhead): {best:.1f} s = {sum(per_cell) / best:.2f}x serial; longest cell "
          f"{max(per_cell):.1f} s; rows byte-identical in every run; load average now "
          f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
