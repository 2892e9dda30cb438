"""The local worker pool: independent simulator runs in forked worker processes.

`fork_map(fn, n, jobs)` runs fn(0) .. fn(n - 1) in `jobs` processes forked from this one, so
they inherit what the caller prepared (a loaded trace, the configurations) without pickling it;
`fn` is a module-level function that reads it from a module global the caller set. Results come
back in order, each to `on_result` as it finishes (progress: a run that ends early is said at
once, not after the runs before it), and `gc.freeze()` keeps the
inherited heap from being scanned (or copied on write by the collector) in the workers.
Where fork is not offered (not Linux), or jobs is 1, the runs go one after the other here.
Used by `simulate_many` (sim.py: `configs`) and the explainer's what-ifs (explain.py).
Leaves out: spawn-based pools (they would pickle the trace into every worker).
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any


def fork_map(fn: Callable[[int], Any], n: int, jobs: int = 1,
             on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """[fn(0), ..., fn(n - 1)], in up to `jobs` forked workers; `on_result(i, result)` hears
    each as it finishes (in order with one job).

    >>> fork_map(abs, 3, jobs=1, on_result=lambda i, r: print(i, r))
    0 0
    1 1
    2 2
    [0, 1, 2]
    """
    jobs = max(1, min(jobs, n))
    results: list[Any] = [None] * n
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        for i in range(n):
            results[i] = fn(i)
            if on_result is not None:
                on_result(i, results[i])
        return results
    gc.freeze()  # what the workers inherit is never scanned there (nor copied on write by it)
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            futures = {pool.submit(fn, i): i for i in range(n)}
            try:
                for future in as_completed(futures):
                    i = futures[future]
                    results[i] = future.result()
                    if on_result is not None:
                        on_result(i, results[i])
            except BaseException:  # a cancel (on_result raised): the runs not started never do
                for future in futures:
                    future.cancel()
                raise
    finally:
        gc.unfreeze()
    return results
