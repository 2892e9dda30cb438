"""A bounded worker pool for heavy work (replays, simulations), with a queue a page can show.

A job is a function `fn(progress, cancel)`: it reports `progress(fraction, text)` and stops when
`cancel` (a threading.Event) is set. At most `workers` jobs run at once; the rest wait in
submission order, each knowing its place, and at most `max_queued` may wait (a submit past that
is refused with the figures). Cancelling a waiting job drops it; a running one is asked to stop.
Finished jobs keep their result until the page takes it. Leaves out: processes (two threads
on a 2-core server keep pages responsive; a job whose work should leave the server with its
memory starts its own and kills them on cancel: the what-ifs, spawn_map in
radix/runs/workers.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

Work = Callable[[Callable[[float, str], None], threading.Event], Any]


class QueueFull(RuntimeError):
    """Too many jobs wait already."""


class Job:
    """One unit of work; read `state`, `place()`, `fraction`, `text`, then `result()`."""

    def __init__(self, pool: JobPool, name: str, fn: Work) -> None:
        self.pool, self.name, self.fn = pool, name, fn
        self.id = next(pool._ids)
        self.state = "queued"  # queued | running | done | failed | cancelled
        self.fraction, self.text = 0.0, "waiting for a worker"
        self.cancel_event = threading.Event()
        self.submitted = time.monotonic()
        self.started: float | None = None
        self.finished = threading.Event()
        self._result: Any = None
        self.error: BaseException | None = None

    def place(self) -> int:
        """1 for the next to start, 2 after it...; 0 once it runs or ended."""
        return self.pool._place(self)

    @property
    def pending(self) -> bool:
        return self.state in ("queued", "running")

    def cancel(self) -> None:
        self.cancel_event.set()
        self.pool._drop(self)

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    def result(self) -> Any:
        """The function's return value; its exception if it failed."""
        if self.error is not None:
            raise self.error
        return self._result

    def take(self) -> Any:
        """`result()`, handed over once: the job lets go of it, so that what still refers to
        the job (a waiting fragment of a closed browser session) does not keep the result."""
        out, self._result = self.result(), None
        return out

    def _progress(self, fraction: float, text: str) -> None:
        self.fraction, self.text = max(0.0, min(1.0, fraction)), text


class JobPool:
    """`submit(name, fn)` -> Job; `workers` threads take jobs in order."""

    def __init__(self, workers: int = 2, max_queued: int = 16) -> None:
        self.workers, self.max_queued = workers, max_queued
        self._ids = itertools.count(1)
        self._lock = threading.Condition()
        self._queue: deque[Job] = deque()
        self._running: set[Job] = set()
        for i in range(workers):
            threading.Thread(target=self._work, name=f"radixlens-job-{i}", daemon=True).start()

    def submit(self, name: str, fn: Work) -> Job:
        with self._lock:
            if len(self._queue) >= self.max_queued:
                raise QueueFull(f"{len(self._queue):,} jobs are waiting (at most "
                                f"{self.max_queued:,}); try again in a moment")
            job = Job(self, name, fn)
            self._queue.append(job)
            self._lock.notify()
        return job

    def _place(self, job: Job) -> int:
        with self._lock:
            try:
                return self._queue.index(job) + 1
            except ValueError:
                return 0

    def _drop(self, job: Job) -> None:
        with self._lock:
            if job in self._queue:
                self._queue.remove(job)
                job.state, job.text = "cancelled", "cancelled before it started"
                job.finished.set()

    def status(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._lock:
            return len(self._running), len(self._queue)

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait()
                job = self._queue.popleft()
                self._running.add(job)
            job.state, job.started = "running", time.monotonic()
            try:
                job._result = job.fn(job._progress, job.cancel_event)
                job.state = "cancelled" if job.cancel_event.is_set() else "done"
            except BaseException as exc:  # noqa: BLE001 - handed to the page through the job
                job.error = exc
                job.state = "cancelled" if job.cancel_event.is_set() else "failed"
            finally:
                with self._lock:
                    self._running.discard(job)
                job.fn = None  # the closure may hold big inputs (an upload's bytes)
                job.finished.set()
            # subtle: this frame's `job` would keep the last job (and its result, a replay of
            # hundreds of MB) alive until the next job arrives, long after its session is gone
            del job
