"""Compact integer sequences for keeping a long replay's events: runs, or a machine array.

A replayed trace logs every new leaf's token ids and KV slots (NodeInserted) and every evicted
leaf's slots (NodeEvicted). As tuples of Python ints that costs ~36 bytes a token: a 4,000-request
Mooncake trace logs ~50 M tokens, several GB. Mooncake's tokens come in runs (block u stands for
u*512 .. u*512+511) and the slot allocator hands out runs too, so `compact` keeps a sequence as
`Runs` (start, length pairs) when that is smaller, else as `array('q')` (8 bytes a token). Both
behave as read-only sequences (len, index, slice, iterate, ==) for the tree model and the words.
Leaves out: mutation; `Runs` slices are Runs again.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any

import numpy as np


class Runs(Sequence):
    """Consecutive ints as (start, length) runs.

    >>> r = Runs.of([5, 6, 7, 10, 11]); len(r), list(r), r[3], list(r[2:4])
    (5, [5, 6, 7, 10, 11], 10, [7, 10])
    """

    __slots__ = ("starts", "lens", "ends", "_n")

    def __init__(self, starts: array, lens: array) -> None:
        self.starts, self.lens = starts, lens
        self.ends = array("q", accumulate(lens))  # offset just past each run
        self._n = self.ends[-1] if self.ends else 0

    @classmethod
    def of(cls, values: Sequence[int]) -> Runs:
        a = np.asarray(values, dtype=np.int64)
        firsts = np.concatenate(([0], np.flatnonzero(np.diff(a) != 1) + 1)) if len(a) else a
        lens = np.diff(np.concatenate((firsts, [len(a)]))) if len(a) else a
        return cls(array("q", a[firsts].tobytes()), array("q", lens.astype(np.int64).tobytes()))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            lo, hi, step = i.indices(self._n)
            if step != 1:
                return list(self)[i]
            return self._slice(lo, max(hi, lo))
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("Runs index out of range")
        k = bisect.bisect_right(self.ends, i)
        return self.starts[k] + i - (self.ends[k] - self.lens[k])

    def _slice(self, lo: int, hi: int) -> Runs:
        starts, lens = array("q"), array("q")
        k = bisect.bisect_right(self.ends, lo)
        while lo < hi:
            begin = self.ends[k] - self.lens[k]
            take = min(self.ends[k], hi) - lo
            starts.append(self.starts[k] + lo - begin)
            lens.append(take)
            lo += take
            k += 1
        return Runs(starts, lens)

    def __iter__(self) -> Iterator[int]:
        for s, n in zip(self.starts, self.lens):
            yield from range(s, s + n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != self._n:
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"Runs({len(self.starts)} runs, {self._n} ints)"

    @property
    def nbytes(self) -> int:
        return 24 * len(self.starts)


def compact(values: Sequence[int]) -> Sequence[int]:
    """`Runs` when the values form fewer than len / 4 runs, else `array('q')` (numpy finds the
    runs: a Python loop over 50 M tokens would cost a minute).

    >>> type(compact(range(100))).__name__, type(compact([3, 1, 2])).__name__
    ('Runs', 'array')
    """
    if isinstance(values, Runs | array):
        return values
    a = np.asarray(values, dtype=np.int64)
    if (np.count_nonzero(np.diff(a) != 1) + 1) * 4 > len(a):
        return array("q", a.tobytes())
    return Runs.of(a)


def nbytes(values: Sequence[int]) -> int:
    """Bytes a compacted sequence keeps: 24 per run, 8 per array item, ~36 per tuple item."""
    if isinstance(values, Runs):
        return values.nbytes
    if isinstance(values, array):
        return values.itemsize * len(values)
    return 36 * len(values)
