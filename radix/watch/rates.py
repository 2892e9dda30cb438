"""Stored and removed blocks per second, from a stream's history of applied batches.

A `Stream` keeps `(received at, blocks stored, blocks removed)` per batch; `rate_series` bins the
last `window` seconds into `bucket`-second bins (oldest first), `recent_rates` gives the rates
over the last few seconds. Times are the subscriber's receive times (wall clock), so a batch
caught up by replay counts when it was replayed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class RateBin(NamedTuple):
    start: float  # seconds, wall clock
    stored_per_s: float
    removed_per_s: float


def rate_series(history: Iterable[tuple[float, int, int]], now: float, window: float = 60.0,
                bucket: float = 1.0) -> list[RateBin]:
    """Bins of `bucket` seconds covering (now - window, now], oldest first.

    >>> [tuple(b) for b in rate_series([(9.5, 4, 0), (9.9, 2, 1)], now=10.0, window=2.0)]
    [(8.0, 0.0, 0.0), (9.0, 6.0, 1.0)]
    """
    if bucket <= 0 or window < bucket:
        raise ValueError("need window >= bucket > 0")
    n = int(round(window / bucket))
    first = now - n * bucket
    stored, removed = [0] * n, [0] * n
    for at, s, r in history:
        i = int((at - first) // bucket)
        if 0 <= i < n:
            stored[i] += s
            removed[i] += r
    return [RateBin(first + i * bucket, stored[i] / bucket, removed[i] / bucket)
            for i in range(n)]


def recent_rates(history: Iterable[tuple[float, int, int]], now: float,
                 seconds: float = 5.0) -> tuple[float, float]:
    """(stored, removed) blocks per second over the last `seconds`.

    >>> recent_rates([(1.0, 10, 0), (9.0, 5, 5)], now=10.0, seconds=5.0)
    (1.0, 1.0)
    """
    stored = removed = 0
    for at, s, r in history:
        if now - seconds < at <= now:
            stored += s
            removed += r
    return stored / seconds, removed / seconds
