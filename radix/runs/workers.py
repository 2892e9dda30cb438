"""The local worker pools: independent simulator runs in worker processes.

`fork_map(fn, n, jobs)` runs fn(0) .. fn(n - 1) in `jobs` processes forked from this one, so
they inherit what the caller prepared (a loaded trace, the configurations) without pickling it;
`fn` is a module-level function that reads it from a module global the caller set. Results come
back in order, each to `on_result` as it finishes (progress: a run that ends early is said at
once, not after the runs before it), and `gc.freeze()` keeps the
inherited heap from being scanned (or copied on write by the collector) in the workers.
Where fork is not offered (not Linux), or jobs is 1, the runs go one after the other here.
Used by `simulate_many` (sim.py: `configs`) and the explainer's what-ifs (explain.py).
`spawn_map` is the same for a process with threads (the app's server: fork copies whatever
another thread holds locked): fresh interpreters that import `fn` by name, get their inputs
once each from `setup`, are killed when the caller stops (`poll` raises: a cancel) and exit
when the runs are done, so what they built goes back to the system with them.
Leaves out: reusing workers across calls (each call starts its own: ~1 s of imports each).
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import pickle
import sys
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing.connection import wait
from typing import Any

POLL_S = 0.5  # spawn_map calls `poll` at least this often while the workers run
_MAIN_SWAP = threading.Lock()


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


@contextlib.contextmanager
def bare_main() -> Iterator[None]:
    """multiprocessing's spawn makes the child import the parent's `__main__` from its file
    first. Streamlit (and its AppTest) makes each page script `__main__` while it runs, so the
    child would run the page bare, which in AppTest killed it before it read its arguments
    and hung the start. The child needs nothing from `__main__` (its target is imported by
    name), so a blank module stands in while the process starts (a few ms; other threads
    reading sys.modules["__main__"] meanwhile would see the blank one)."""
    with _MAIN_SWAP:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


def spawn_map(fn: Callable[[int], Any], n: int, jobs: int = 1,
              on_result: Callable[[int, Any], None] | None = None,
              setup: Callable[..., None] | None = None, setup_args: tuple = (),
              poll: Callable[[], None] | None = None) -> list[Any]:
    """[fn(0), ..., fn(n - 1)] in up to `jobs` spawned worker processes (one at least, even
    for jobs=1: the work's memory leaves with it). `fn` and `setup` are module-level
    functions (the workers import them by name); each worker first runs
    `setup(*setup_args)` (the arguments pickled once per worker), then takes indexes one at
    a time. `on_result(i, result)` hears each as it finishes; `poll()` is called at least
    every POLL_S while they run. If either raises (a cancel), or a run does, every worker is
    killed and the exception goes on to the caller.

    >>> spawn_map(abs, 0)
    []
    """
    if n <= 0:
        return []
    results: list[Any] = [None] * n
    ctx = multiprocessing.get_context("spawn")
    workers: list[tuple[Any, Any]] = []  # (process, the parent's end of its pipe)
    finished = False
    try:
        with bare_main():
            for _ in range(max(1, min(jobs, n))):
                here, there = ctx.Pipe()
                process = ctx.Process(target=_serve, args=(there, fn, setup, setup_args),
                                      name="radixlens-worker", daemon=True)
                process.start()
                there.close()
                workers.append((process, here))
        todo = iter(range(n))
        busy = {}  # pipe -> its process, while it runs an index
        for process, conn in workers:
            i = next(todo, None)
            conn.send(i)
            if i is not None:
                busy[conn] = process
        while busy:
            for conn in wait(list(busy), POLL_S):
                try:
                    i, ok, value = conn.recv()
                except EOFError:
                    busy[conn].join(1)
                    raise RuntimeError(f"a worker process died (exit code "
                                       f"{busy[conn].exitcode})") from None
                if not ok:
                    raise value
                results[i] = value
                if on_result is not None:
                    on_result(i, value)
                i = next(todo, None)
                conn.send(i)
                if i is None:
                    del busy[conn]
            if poll is not None:
                poll()
        finished = True
    finally:
        for process, conn in workers:
            if not finished:
                process.kill()
            process.join()
            conn.close()
    return results


def _serve(conn: Any, fn: Callable[[int], Any], setup: Callable[..., None] | None,
           setup_args: tuple) -> None:
    """A spawned worker: `setup`, then fn(i) for each index sent, until None."""
    failed = None
    try:
        if setup is not None:
            setup(*setup_args)
    except Exception as exc:  # noqa: BLE001 - said as the answer to the first index
        failed = exc
    while (i := conn.recv()) is not None:
        try:
            if failed is not None:
                raise failed
            conn.send((i, True, fn(i)))
        except Exception as exc:  # noqa: BLE001 - raised in the parent
            conn.send((i, False, _portable(exc)))


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a RuntimeError that names it."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")
