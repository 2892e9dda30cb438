"""How slow this machine is now, so that the tests' waits stretch with it instead of failing.

A test's timeout only turns a hang into a failure; it must never decide whether slow-but-working
code passes. So every wait in tests/ (AppTest's default_timeout, Playwright's timeouts, a
future's `.result(timeout=...)`, a server's start) is a base figure for an idle machine times
`factor()`: a small fixed CPU workload is timed once per test session (the median of 5 runs)
against its time on an idle core of the 2-core development machine, and the ratio is clipped
to [1, 10]. A loaded machine (a shared CI runner, eight engineers on two cores) measures 2-6. Under
pytest-xdist the factor is at least the number of workers.
`RADIXLENS_SLOW_FACTOR=N` sets the factor instead (still clipped), e.g. to reproduce a run.

What stays out: no test asserts on wall-clock time (a benchmark prints it); waiting for a state
polls for it (`poll_until`), so the factor only sets how long before giving up.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
REFERENCE_S = 0.018  # the workload's median on an idle core of the 2-core development machine
LOW, HIGH = 1.0, 10.0


def _workload() -> float:
    """Seconds for a fixed pure-Python loop (~18 ms on an idle core)."""
    started = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i * i % 7
    return time.perf_counter() - started


def _clip(x: float) -> float:
    return min(HIGH, max(LOW, x))


@functools.cache
def factor() -> float:
    """The machine factor for this session, in [1, 10]: 1 on an idle development machine.

    >>> 1.0 <= factor() <= 10.0
    True
    """
    forced = os.environ.get("RADIXLENS_SLOW_FACTOR")
    if forced:
        return _clip(float(forced))
    measured = statistics.median(_workload() for _ in range(5)) / REFERENCE_S
    # pytest-xdist's workers share the cores: a worker measures once, often before the others
    # are busy, so each wait counts at least one share per worker
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return _clip(max(measured, workers))


def seconds(base: float) -> float:
    """A wait of `base` seconds on an idle machine, stretched by the factor."""
    return base * factor()


def ms(base: int) -> int:
    """A Playwright wait of `base` milliseconds on an idle machine, stretched by the factor."""
    return int(base * factor())


def poll_until(ready: Callable[[], T], base_s: float, what: Callable[[], object] = str,
               every_s: float = 0.05) -> T:
    """Polls `ready()` until it returns something truthy and returns that; fails after
    `seconds(base_s)` with `what()` (the state seen) in the message."""
    deadline = time.monotonic() + seconds(base_s)
    while not (got := ready()):
        assert time.monotonic() < deadline, f"not ready after {seconds(base_s):.0f} s: {what()}"
        time.sleep(every_s)
    return got
