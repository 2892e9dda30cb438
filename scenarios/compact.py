"""Compact integer sequences for keeping a long replay's events: runs, or a machine array.

A replayed trace logs every new leaf's token ids and KV slots (NodeInserted) and every evicted
leaf's slots (NodeEvicted). As tuples of Python ints that costs ~36 bytes a token: a 4,000-request
Mooncake trace logs ~50 M tokens, several GB. Mooncake's tokens come in runs (block u stands for
u*512 .. u*512+511) and the slot allocators hand out runs too, so `compact` keeps a sequence as
radix's `TokenRuns` when that is smaller, else as `array('q')` (8 bytes a token). Both behave as
read-only sequences (len, index, slice, iterate, ==) for the tree model and the words.
Leaves out: mutation.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from radix.tokens import TokenRuns

RUN_BYTES = 80  # a TokenRuns run: a start and an end, each a list slot and an int object


def compact(values: Sequence[int]) -> Sequence[int]:
    """`TokenRuns` when the values form fewer than len / 4 runs, else `array('q')` (numpy finds
    the runs: a Python loop over 50 M tokens would cost a minute). Values past int64 (compact
    traces' synthetic replies) are kept as runs either way.

    >>> type(compact(range(100))).__name__, type(compact([3, 1, 2])).__name__
    ('TokenRuns', 'array')
    """
    if isinstance(values, TokenRuns):  # a RunList (mutable) is frozen into a TokenRuns
        return values if type(values) is TokenRuns else TokenRuns(values.runs())
    if isinstance(values, array):
        return values
    try:
        a = np.asarray(values, dtype=np.int64)
    except OverflowError:
        return TokenRuns.from_ids(values)
    breaks = np.flatnonzero(np.diff(a) != 1) + 1
    if (len(breaks) + 1) * 4 > len(a):
        return array("q", a.tobytes())
    firsts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(a)]))
    return TokenRuns(zip(a[firsts].tolist(), (ends - firsts).tolist(), strict=True))


def nbytes(values: Sequence[int]) -> int:
    """Bytes a compacted sequence keeps: ~80 per run, 8 per array item, ~36 per tuple item.

    >>> nbytes(compact(range(1000))), nbytes(compact([3, 1, 2]))
    (80, 24)
    """
    if isinstance(values, TokenRuns):
        return RUN_BYTES * values.num_runs
    if isinstance(values, array):
        return values.itemsize * len(values)
    return 36 * len(values)
