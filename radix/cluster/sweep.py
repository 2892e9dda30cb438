"""The sweep: a grid of cluster simulations (replicas x router x capacity x page size x block
size), run one after another or as Ray tasks, the results in grid order either way.

`grid_cells` expands a `Grid`; `run_cell` is one simulation (radix/cluster/sim.py) and returns a
JSON-ready row; `sweep_serial` runs them here, `sweep_ray` as one Ray task each (`ray.init()`
on this machine by default, or an existing cluster's address, whose workers get this `radix`
shipped as Ray `py_modules`). Each row depends only on the trace and the cell, so the two give
the same rows byte for byte (a test). Ray is imported only inside `sweep_ray`. Leaves out:
caching results, retries beyond Ray's own.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radix.cluster import ROUTERS
from radix.cluster.sim import MAX_REPLICAS, simulate_cluster
from radix.runs.sim import SimConfig
from radix.traces.trace import Trace

AXES = ("replicas", "router", "capacity", "page_size", "block_size")


@dataclass(frozen=True)
class Grid:
    replicas: tuple[int, ...] = (1, 2, 4, 8)
    router: tuple[str, ...] = ROUTERS
    capacity: tuple[int | None, ...] = (None,)  # KV pool per replica, tokens; None: unbounded
    page_size: tuple[int, ...] = (1,)  # the tree's page size
    block_size: tuple[int, ...] = (16,)  # vLLM's block size (the shadow)

    def __post_init__(self) -> None:
        for axis in AXES:
            if not getattr(self, axis):
                raise ValueError(f"grid axis {axis!r} is empty")
        bad = [r for r in self.router if r not in ROUTERS]
        if bad:
            raise ValueError(f"grid router: unknown {bad}; one of {', '.join(ROUTERS)}")
        for axis in ("replicas", "page_size", "block_size"):
            if min(getattr(self, axis)) < 1:
                raise ValueError(f"grid {axis} must all be >= 1, got {getattr(self, axis)}")
        if max(self.replicas) > MAX_REPLICAS:
            raise ValueError(f"grid replicas must all be <= {MAX_REPLICAS:,}, got "
                             f"{max(self.replicas):,}")
        if any(c is not None and c < 1 for c in self.capacity):
            raise ValueError(f"grid capacity must be >= 1 or none, got {self.capacity}")


def load_grid(path: str | Path) -> Grid:
    """A grid file, JSON or TOML (by suffix): each axis a list, e.g. `replicas = [1, 2, 4]`,
    `capacity = ["none", 100000]`. Unknown keys are an error naming them."""
    text = Path(path).read_text()
    try:
        data = tomllib.loads(text) if str(path).endswith(".toml") else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a valid grid file: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a grid file holds one table of axes")
    unknown = sorted(set(data) - set(AXES))
    if unknown:
        raise ValueError(f"{path}: unknown grid keys {unknown}; the axes are {', '.join(AXES)}")
    out: dict[str, tuple] = {}
    for key, value in data.items():
        if not isinstance(value, list):
            raise ValueError(f"{path}: field {key!r}: expected a list, got {type(value).__name__}")
        if key == "capacity":
            value = [None if v in (None, "none") else v for v in value]
        ok = str if key == "router" else int
        for v in value:
            if not (v is None and key == "capacity") and (type(v) is not ok):
                raise ValueError(f"{path}: field {key!r}: expected {ok.__name__}s, got {v!r}")
        out[key] = tuple(value)
    return Grid(**out)


def grid_cells(grid: Grid) -> list[dict[str, Any]]:
    """Every combination, replicas varying slowest.

    >>> [c["router"] for c in grid_cells(Grid(replicas=(1,), router=("random", "session")))]
    ['random', 'session']
    """
    return [dict(zip(AXES, values, strict=True))
            for values in itertools.product(*(getattr(grid, a) for a in AXES))]


def run_cell(trace: Trace, cell: dict[str, Any]) -> dict[str, Any]:
    cfg = SimConfig(capacity=cell["capacity"], page_size=cell["page_size"],
                    block_size=cell["block_size"])
    res = simulate_cluster(trace, cell["replicas"], cell["router"], cfg)
    return {**cell, "totals": res.totals, "per_replica": res.per_replica, "reasons": res.reasons}


def sweep_serial(trace: Trace, cells: list[dict[str, Any]],
                 progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    rows = []
    for cell in cells:
        rows.append(run_cell(trace, cell))
        if progress is not None:
            progress(len(rows), len(cells))
    return rows


def sweep_ray(trace: Trace, cells: list[dict[str, Any]], *, address: str | None = None,
              num_cpus: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """One Ray task per cell (the trace put in the object store once). Starts a local Ray
    with `num_cpus` workers unless one is running or `address` names a cluster; shuts down
    only a Ray it started."""
    import ray  # noqa: PLC0415 (optional: only the sweep needs it)

    started = not ray.is_initialized()
    if started:
        start_ray(address, num_cpus)
    try:
        remote = ray.remote(num_cpus=1)(run_cell)
        ref = ray.put(trace)
        pending = {remote.remote(ref, cell): i for i, cell in enumerate(cells)}
        rows: list[Any] = [None] * len(cells)
        done = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for r in ready:
                rows[pending.pop(r)] = ray.get(r)
                done += 1
                if progress is not None:
                    progress(done, len(cells))
        return rows
    finally:
        if started:
            ray.shutdown()


# how many times a local Ray is started before its slow start is reported, and the words of it
RAY_START_TRIES = 3
RAY_SLOW_START = "timed out during startup"


def start_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """`ray.init` for the sweep: a local Ray (whose workers find `radix` on PYTHONPATH) with
    `num_cpus` CPUs, or the cluster at `address`, to which this very `radix` package is shipped
    (Ray's `py_modules`: its workers need no copy of their own, and run the driver's code); no
    dashboard, workers' logs kept apart."""
    import ray  # noqa: PLC0415

    package = Path(__file__).resolve().parents[1]
    if address is None:
        path = os.pathsep.join(p for p in (str(package.parent), os.environ.get("PYTHONPATH"))
                               if p)
        runtime_env: dict[str, Any] = {"env_vars": {"PYTHONPATH": path}}
    else:
        if num_cpus is not None:
            raise ValueError("--workers sets a local Ray's CPUs; the cluster at "
                             f"--ray-address {address} has its own")
        runtime_env = {"py_modules": [str(package)]}
    tries = RAY_START_TRIES if address is None else 1  # a cluster's head is not ours to restart
    for attempt in range(1, tries + 1):
        try:
            ray.init(address=address, num_cpus=num_cpus, include_dashboard=False,
                     log_to_driver=False, runtime_env=runtime_env)
            return
        except Exception as error:
            # a local Ray waits a hard-coded 30 s for its raylet (ray/_private/node.py) and
            # raises a bare Exception on a loaded machine: slow, not broken, so start again
            if RAY_SLOW_START not in str(error) or attempt == tries:
                raise
            ray.shutdown()
            print(f"radix sweep: the local Ray was slow to start ({attempt} of "
                  f"{RAY_START_TRIES}); starting it again", file=sys.stderr)


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
