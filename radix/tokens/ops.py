"""Helpers over token sequences that may be compact (TokenRuns) or plain (lists).

`common_prefix` / `common_prefix_from` compare two sequences of either kind without expanding
runs; `mutable_copy` / `joined` build a request's row, compact when its parts are; `is_compact`
says which kind a sequence is. Follows nothing upstream. Leaves out: anything per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radix.tokens.prefix import plain_prefix, runs_agree
from radix.tokens.runs import RunList, TokenRuns


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences, compact or plain.

    >>> common_prefix([1, 2, 3], TokenRuns([(1, 2), (9, 1)])), common_prefix([4, 5], [4, 6])
    (2, 1)
    """
    if isinstance(a, TokenRuns):
        return a.common_prefix_len(b)
    if isinstance(b, TokenRuns):
        return b.common_prefix_len(a)
    return plain_prefix(a, b)


def common_prefix_from(a: Sequence[int], b: Sequence[int], start: int, end: int) -> int:
    """How far a[start:end] and b[start:end] agree, counted from `start` (both sequences are
    read at the same offsets: two chains from position 0), without slicing compact ones.

    >>> common_prefix_from(TokenRuns([(0, 10)]), TokenRuns([(0, 6), (99, 4)]), 2, 9)
    4
    """
    if not (isinstance(a, TokenRuns) and isinstance(b, TokenRuns)):
        return common_prefix(a[start:end], b[start:end])
    end = min(end, len(a), len(b))
    return runs_agree(a._starts, a._ends, b._starts, b._ends, start, end)


def is_compact(seq: Any) -> bool:
    """True for TokenRuns and RunList (sequences that must never be expanded per token)."""
    return isinstance(seq, TokenRuns)


def frozen(seq: Sequence[int]) -> tuple[int, ...] | TokenRuns:
    """An immutable copy for an event or a snapshot: a tuple for plain input, a TokenRuns for
    compact input (a RunList is frozen, never expanded per token).

    >>> frozen([1, 2]), frozen(RunList([(4, 2)]))
    ((1, 2), TokenRuns([(4, 2)]))
    """
    if isinstance(seq, TokenRuns):
        if type(seq) is TokenRuns:
            return seq
        return TokenRuns._raw(list(seq._starts), list(seq._ends))
    return tuple(seq)


def mutable_copy(seq: Sequence[int]) -> list[int] | RunList:
    """A fresh mutable row with the same ints: a list for plain input, a RunList for compact
    input (so a request's row stays compact).

    >>> mutable_copy([1, 2]), mutable_copy(TokenRuns([(4, 2)]))
    ([1, 2], RunList([(4, 2)]))
    """
    if isinstance(seq, TokenRuns):
        return RunList._raw(list(seq._starts), list(seq._ends))
    return list(seq)


def joined(prefix: Sequence[int], rest: Sequence[int]) -> list[int] | RunList:
    """A fresh mutable row prefix + rest, compact when either part is.

    >>> joined([1], [2, 3]), joined([], TokenRuns([(7, 3)]))
    ([1, 2, 3], RunList([(7, 3)]))
    """
    if isinstance(prefix, TokenRuns) or isinstance(rest, TokenRuns):
        row = mutable_copy(prefix) if isinstance(prefix, TokenRuns) else RunList.from_ids(prefix)
        row.extend(rest)
        return row
    return [*prefix, *rest]
