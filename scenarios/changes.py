"""A room's change counter and when each change happened, for viewers that redraw on change.

`Changes.mark()` raises `version` by one (any thread); the log keeps the wall time at which each
run of changes began, coalescing changes less than WINDOW_S apart, so a viewer that last drew
version v can ask `first_change_after(v)`: the time the first change it has not shown happened
(at most WINDOW_S early: a latency measured from it errs long, never short). `RoomTree` is the
Live tree (scenarios/live.py) that also marks every engine event it hears, at the event's time.
Leaves out: what changed (viewers reread the room).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from typing import Any

from scenarios.live import LiveTree

WINDOW_S = 0.01  # changes closer than this share one log entry
MAX_LOG = 1_024  # log entries kept (about 10 s of continuous change at most)


class Changes:
    """Thread-safe: `mark` from the engine thread and the pages, `version` from anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version = 0
        self._log: deque[tuple[int, float]] = deque(maxlen=MAX_LOG)  # (first version, time)

    def mark(self, wall_time: float | None = None) -> int:
        """One change at `wall_time` (time.time(); now by default); returns the new version."""
        now = time.time() if wall_time is None else wall_time
        with self._lock:
            self.version += 1
            if not self._log or now - self._log[-1][1] >= WINDOW_S:
                self._log.append((self.version, now))
            return self.version

    def first_change_after(self, seen: int) -> float | None:
        """When version seen + 1 happened (the start of its log entry); None if there is no
        such change yet. Older than the log: its oldest entry's time."""
        with self._lock:
            if self.version <= seen or not self._log:
                return None
            firsts = [v for v, _ in self._log]
            i = max(bisect.bisect_right(firsts, seen + 1) - 1, 0)
            return self._log[i][1]


class RoomTree(LiveTree):
    """A LiveTree that marks `changes` for every event the engine hands it."""

    def __init__(self, changes: Changes, max_told: int = 200, max_kept: int = 500) -> None:
        super().__init__(max_told)
        self.changes, self.max_kept = changes, max_kept

    def __call__(self, stamped: Any) -> None:
        super().__call__(stamped)
        self.changes.mark(stamped.wall_time)
        if len(self._admitted) > 2 * self.max_kept:  # bounded in a long lesson
            with self._lock:
                for rid in list(self._admitted)[:-self.max_kept]:
                    self._admitted.pop(rid, None)
                    self._chunks.pop(rid, None)
                live = self._model.nodes
                self._owners = {n: rid for n, rid in self._owners.items() if n in live}
