"""spawn_map (radix/runs/workers.py): runs in spawned workers that exit when done, and are
killed when the caller stops (a cancel) or a run fails."""

from __future__ import annotations

import multiprocessing
import signal
import threading

import pytest

from radix.runs.workers import spawn_map

_OFFSET = [0]  # set in each worker by `_setup`


class Stop(Exception):
    """What a cancelled job's progress raises."""


def _setup(offset: int) -> None:
    _OFFSET[0] = offset


def _plus_offset(i: int) -> int:
    if i == 3:
        raise ValueError("run 3 fails")
    return i + _OFFSET[0]


def _forever(i: int) -> None:
    threading.Event().wait()  # a run that only a kill ends


def _workers() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "radixlens-worker"]


def test_results_in_order_from_workers_set_up_once_and_gone_after():
    """Three runs in two workers, each worker handed 100 by its setup: 100, 101, 102, each
    heard once; then no worker is left. A run that raises reaches the caller as itself."""
    heard = []
    assert spawn_map(_plus_offset, 3, jobs=2, on_result=lambda i, r: heard.append((i, r)),
                     setup=_setup, setup_args=(100,)) == [100, 101, 102]
    assert sorted(heard) == [(0, 100), (1, 101), (2, 102)] and not _workers()
    with pytest.raises(ValueError, match="run 3 fails"):
        spawn_map(_plus_offset, 5, jobs=1)
    assert not _workers()


def test_a_poll_that_raises_kills_the_running_workers():
    """Two runs that never end: the first poll (within POLL_S) sees both workers alive and
    raises; both are killed (SIGKILL) before spawn_map hands the exception on."""
    seen = []

    def poll() -> None:
        seen.extend(_workers())
        raise Stop("cancelled")

    with pytest.raises(Stop):
        spawn_map(_forever, 2, jobs=2, poll=poll)
    assert len(seen) == 2
    assert [p.exitcode for p in seen] == [-signal.SIGKILL] * 2 and not _workers()
