"""`python -m radix sweep TRACE`: a grid of cluster simulations on Ray (radix/cluster/sweep.py).

The grid comes from flags (`--replicas 1,2,4 --router all --capacity none,100000 --page-size
1,16 --block-size 16`) or a TOML/JSON file (`--grid`). Local Ray by default (`--workers N`
CPUs), `--ray-address` for a running cluster, `--serial` for no Ray at all; a progress bar on
stderr; rows as JSON lines (`--out`) and the plots as HTML (`--html`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from radix.cli import InputError
from radix.cli.cluster import MEMORY_HINT, load_sim_trace, replica_list, router_list
from radix.cli.options import check_writable
from radix.cluster import ROUTERS
from radix.cluster.sweep import Grid, grid_cells, load_grid, sweep_ray, sweep_serial, to_jsonl
from radix.cluster.sweep_html import sweep_html


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sweep", help="a grid of cluster simulations, on Ray")
    p.add_argument("trace", help="a request or Mooncake trace")
    p.add_argument("--grid", default=None, help="a TOML or JSON grid file (instead of flags)")
    p.add_argument("--replicas", type=replica_list, default=[1, 2, 4, 8])
    p.add_argument("--router", type=router_list, default=list(ROUTERS))
    p.add_argument("--capacity", type=_capacities, default=[None],
                   help="comma-separated pool sizes per replica, tokens, or 'none' (unbounded)")
    p.add_argument("--page-size", type=_ints("--page-size"), default=[1])
    p.add_argument("--block-size", type=_ints("--block-size"), default=[16])
    p.add_argument("--ray-address", default=None,
                   help="an existing Ray cluster's HOST:PORT (default: a local Ray); this radix "
                        "is shipped to its workers")
    p.add_argument("--workers", type=_ints("--workers"), default=None,
                   help="CPUs of the local Ray (default: all)")
    p.add_argument("--serial", action="store_true", help="run here, one cell after another")
    p.add_argument("--out", default="sweep.jsonl", help="JSON-lines results (default sweep.jsonl)")
    p.add_argument("--html", default=None, help="write the plots to this HTML file")
    p.set_defaults(func=run_sweep, memory_hint=MEMORY_HINT)


def _ints(flag: str):
    def parse(text: str) -> list[int] | int:
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} must be whole numbers, got {text!r}") from None
        if min(values) < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be >= 1, got {text!r}")
        return values[0] if flag == "--workers" else values
    return parse


def _capacities(text: str) -> list[int | None]:
    out: list[int | None] = []
    for part in text.split(","):
        if part == "none":
            out.append(None)
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--capacity must be whole numbers or 'none', got {part!r}") from None
    return out


def _progress(done: int, total: int) -> None:
    width = 30
    filled = width * done // total
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def run_sweep(args: argparse.Namespace) -> int:
    for path, flag in ((args.out, "--out"), (args.html, "--html")):
        if path is not None:
            check_writable(path, flag)  # before the cells run, not after
    trace = load_sim_trace(args.trace)
    try:
        grid = load_grid(args.grid) if args.grid else Grid(
            tuple(args.replicas), tuple(args.router), tuple(args.capacity),
            tuple(args.page_size), tuple(args.block_size))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if args.ray_address and args.workers:
        raise InputError("--workers sets a local Ray's CPUs; the cluster at --ray-address "
                         f"{args.ray_address} has its own")
    cells = grid_cells(grid)
    start = time.perf_counter()
    if args.serial:
        rows = sweep_serial(trace, cells, _progress)
    else:
        rows = sweep_ray(trace, cells, address=args.ray_address, num_cpus=args.workers,
                         progress=_progress)
    wall = time.perf_counter() - start
    Path(args.out).write_text(to_jsonl(rows))
    if args.html:
        Path(args.html).write_text(sweep_html(rows, f"sweep of {Path(args.trace).name}"))
    how = "serial" if args.serial else f"Ray ({args.ray_address or 'local'})"
    print(f"{len(rows)} cells in {wall:.1f} s wall, {how}; rows in {args.out}"
          + (f", plots in {args.html}" if args.html else ""))
    return 0
