"""Common prefixes of token sequences: the comparison the tree, the runs and the helpers share.

`gallop_match` compares two plain sequences with slice compares of doubling windows (each done in
C), or lets a compact sequence answer for itself through its `common_prefix_len`; `plain_prefix`
first turns other sequences into lists; `runs_agree` walks two run lists (TokenRuns' starts and
ends) without expanding them; `PrefixProbe` asks "does this list start with that one" without
copying either. Follows nothing upstream. Leaves out: page alignment (callers round down).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence


def gallop_match(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of a and b, by doubling windows then binary search.

    Each probe is one slice compare done in C, so a 100,000-token shared run costs ~17
    compares of growing windows plus ~17 for the binary search, not 100,000 Python steps.

    >>> gallop_match([1, 2, 3, 4], [1, 2, 9])
    2

    A compact token sequence (one that is not a list) may answer for itself through its
    `common_prefix_len(other)` method.
    """
    if type(a) is not list and hasattr(a, "common_prefix_len"):
        return a.common_prefix_len(b)
    n = min(len(a), len(b))
    lo, step = 0, 1
    while lo < n:
        hi = min(lo + step, n)
        if a[lo:hi] != b[lo:hi]:
            # the first difference lies in [lo, hi): binary search it
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[lo:mid] == b[lo:mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        lo = hi
        step *= 2
    return n


def plain_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Common prefix of two sequences of any kind, compared as lists.

    >>> plain_prefix((1, 2, 3), range(1, 9))
    3
    """
    n = min(len(a), len(b))
    return gallop_match(a if isinstance(a, list) else list(a[:n]),
                        b if isinstance(b, list) else list(b[:n]))


def runs_agree(a_starts: Sequence[int], a_ends: Sequence[int], b_starts: Sequence[int],
               b_ends: Sequence[int], start: int, end: int) -> int:
    """How far two run lists agree from position `start` up to `end` (at most both lengths).

    A run list is its runs' first values and the running end positions (TokenRuns' `_starts`
    and `_ends`): [(10, 4), (50, 2)] is starts [10, 50], ends [4, 6], the ints 10 11 12 13 50 51.

    >>> runs_agree([10, 50], [4, 6], [10], [5], 0, 5)  # 10 11 12 13 50 against 10 .. 14
    4
    >>> runs_agree([10, 50], [4, 6], [10, 7], [4, 5], 2, 5)  # from 2: 12 13 50 against 12 13 7
    2
    """
    if start:
        i, j = bisect_right(a_ends, start), bisect_right(b_ends, start)
        a_begin = a_ends[i - 1] if i else 0
        b_begin = b_ends[j - 1] if j else 0
    else:
        i = j = a_begin = b_begin = 0
    pos = start
    while pos < end:
        if a_starts[i] + pos - a_begin != b_starts[j] + pos - b_begin:
            break
        pos = min(a_ends[i], b_ends[j], end)
        if pos == a_ends[i]:
            a_begin = pos
            i += 1
        if pos == b_ends[j]:
            b_begin = pos
            j += 1
    return pos - start


class PrefixProbe:
    """Answers `tok[:len(edge)] == edge` for two lists in one C scan, without slicing `tok`.

    `guard(edge)` is edge plus this probe as a last element (built once, kept by the caller).
    Lists compare in order, pair by pair, until the first unequal pair; so `tok < guarded`
    calls the probe's `__eq__` iff every pair before it was equal, i.e. iff tok starts with
    edge. The probe records that call. An exact compare: nothing is hashed or sampled.

    >>> p = PrefixProbe(); guarded = p.guard([1, 2, 3])
    >>> p.starts_with([1, 2, 3, 4], guarded), p.starts_with([1, 9, 3, 4], guarded)
    (True, False)

    subtle: the probe is reached only if tok is longer than edge; for len(tok) == len(edge)
    the list compare ends on the lengths, so `starts_with` requires len(tok) > len(edge).
    """

    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = False  # set by __eq__: the scan got past the edge's last token

    def guard(self, edge: list[int]) -> list:
        """edge followed by the probe: the list `starts_with` scans against."""
        return edge + [self]

    def starts_with(self, tok: list[int], guarded: list) -> bool:
        """tok[:len(guarded) - 1] == guarded[:-1], for len(tok) >= len(guarded)."""
        self.reached = False
        _ = tok < guarded  # the result is meaningless; whether the scan reached us is not
        return self.reached

    def __eq__(self, other: object) -> bool:
        self.reached = True
        return True  # equal: the scan then ends (guarded has no more items) without ordering us

    __hash__ = None
