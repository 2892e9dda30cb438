"""Progress with the time left, measured: the time so far over the fraction done.

Long runs report `progress(fraction, text)` (explain's what-ifs, the Trace debugger's jobs);
`with_time_left` adds "about N s left" from the run's own pace since it began, not from a guess
priced on another run. Leaves out: smoothing (the what-if runs are alike in cost).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Progress = Callable[[float, str], None]  # (fraction done, what runs now); may raise to stop


def with_time_left(progress: Progress | None, clock: Any = time.perf_counter,
                   start: float = 0.0) -> Progress | None:
    """`progress` with the time left, measured from this call: the time so far over the
    fraction done since `start` (said once 2% of the rest is done; 1 s at least).

    >>> ticks = iter([0.0, 10.0]); said = []
    >>> p = with_time_left(lambda f, t: said.append(t), clock=lambda: next(ticks))
    >>> p(0.25, "what-if 4 of 13"); said  # 10 s for a quarter: 30 s to go
    ['what-if 4 of 13; about 30 s left']
    >>> ticks = iter([0.0, 10.0]); said = []
    >>> p = with_time_left(lambda f, t: said.append(t), clock=lambda: next(ticks), start=0.5)
    >>> p(0.75, "what-if 6 of 12 done"); said  # half the rest in 10 s: 10 s to go
    ['what-if 6 of 12 done; about 10 s left']
    """
    if progress is None:
        return None
    t0 = clock()

    def report(fraction: float, text: str) -> None:
        spent = clock() - t0
        done = (fraction - start) / (1 - start) if start < 1 else 1.0
        if 0.02 <= done < 1:
            text += f"; about {max(spent / done * (1 - done), 1):,.0f} s left"
        progress(fraction, text)
    return report
