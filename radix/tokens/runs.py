"""`TokenRuns` (immutable) and `RunList` (mutable): ints kept as runs, costs growing with runs,
not ints (len, indexing, slicing, ==, hashing, +, `common_prefix_len`: the tree's hook for
compact keys; `concat`: its hook for compact values). Canonical form makes == a compare of two
short lists. Then helpers over either kind or a plain list that never expand runs
(`common_prefix`, `tokens`, `joined`, ...), the common-prefix walks the runs and the tree
share (`gallop_match`, `plain_prefix`, `runs_agree`, `PrefixProbe`), and `PrefixTrie`, a
namespaced trie over token sequences built on those walks (below everything that uses it: the
block extents and hash memo of radix/blocks/, the explainer's probe, the host tier's loss count).
Follows nothing upstream. Leaves out: slices with a step other than 1 (they expand); page
alignment (callers round down); deleting from the trie (it only grows).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, NamedTuple


class TokenRuns(Sequence):
    """An immutable sequence of ints kept as runs (start, length) of consecutive values.

    Canonical: no empty run, and a run never continues the one before it (they are merged),
    so two equal sequences have equal runs and == is a compare of two short lists.

    >>> t = TokenRuns([(1024, 3), (7, 2)]); len(t), list(t), t[3], t.num_runs
    (5, [1024, 1025, 1026, 7, 8], 7, 2)
    >>> t[1:4], t[1:4] == [1025, 1026, 7]
    (TokenRuns([(1025, 2), (7, 1)]), True)
    >>> TokenRuns.from_ids([5, 6, 7, 9]) + [10, 11]  # 9..11 continue one run
    TokenRuns([(5, 3), (9, 3)])
    >>> t.common_prefix_len(TokenRuns([(1024, 2), (0, 9)]))
    2
    """

    __slots__ = ("_starts", "_ends", "_hash")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        starts: list[int] = []  # first value of each run
        ends: list[int] = []  # cumulative end offset of each run (exclusive)
        n, after = 0, None  # the length so far; the value that would continue the last run
        for start, length in runs:  # _append_runs one run at a time, inlined (hot: from_blocks)
            if length < 0:
                raise ValueError(f"a run has a negative length: ({start}, {length})")
            if length:
                n += length
                if start == after:
                    ends[-1] = n
                else:
                    starts.append(start)
                    ends.append(n)
                after = start + length
        self._starts, self._ends, self._hash = starts, ends, None

    # ------------------------------------------------------------------ building
    @classmethod
    def _raw(cls, starts: list[int], ends: list[int]) -> TokenRuns:
        """A sequence over canonical runs the caller hands over (no copy, no check)."""
        out = object.__new__(cls)
        out._starts, out._ends, out._hash = starts, ends, None
        return out

    @classmethod
    def from_ids(cls, ids: Iterable[int]) -> TokenRuns:
        """Compresses explicit ids into runs.

        >>> TokenRuns.from_ids([3, 4, 5, 10]).num_runs
        2
        """
        if isinstance(ids, TokenRuns):
            return cls._raw(list(ids._starts), list(ids._ends))
        starts: list[int] = []
        ends: list[int] = []
        n = 0
        prev = None
        for x in ids:
            if prev is not None and x == prev + 1:
                ends[-1] += 1
            else:
                starts.append(x)
                ends.append(n + 1)
            prev = x
            n += 1
        return cls._raw(starts, ends)

    @classmethod
    def from_blocks(cls, block_ids: Iterable[int], block_size: int, length: int) -> TokenRuns:
        """Block id h stands for tokens h*block_size .. h*block_size + block_size - 1; the whole
        is cut at `length` tokens (the last block may be partial).

        >>> TokenRuns.from_blocks([7, 8, 3], 512, 1100)  # 7 and 8 make one run; 3 keeps 76
        TokenRuns([(3584, 1024), (1536, 76)])
        """
        # __init__ merges adjacent blocks into runs and names a bad (negative) length
        return cls((h * block_size, block_size) for h in block_ids)[:length]

    @classmethod
    def concat(cls, parts: Sequence[Sequence[int]]) -> TokenRuns:
        """One sequence of all parts in order (the tree's `_concat` hook for compact values).

        >>> TokenRuns.concat([TokenRuns([(0, 2)]), TokenRuns([(2, 2)]), [9]])
        TokenRuns([(0, 4), (9, 1)])
        """
        starts: list[int] = []
        ends: list[int] = []
        for part in parts:
            if not isinstance(part, TokenRuns):
                part = TokenRuns.from_ids(part)
            _append_runs(starts, ends, part._starts, part._ends)
        return TokenRuns._raw(starts, ends)

    # ------------------------------------------------------------------ reading
    @property
    def num_runs(self) -> int:
        return len(self._starts)

    def runs(self) -> Iterator[tuple[int, int]]:
        """(start, length) of each run."""
        prev = 0
        for start, end in zip(self._starts, self._ends):
            yield start, end - prev
            prev = end

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(range(s, s + n) for s, n in self.runs())

    def __getitem__(self, index: Any) -> Any:
        ends = self._ends
        if index.__class__ is int and 0 <= index < (ends[-1] if ends else 0):  # the walk's case
            if index < ends[0]:
                return self._starts[0] + index
            i = bisect_right(ends, index)
            return self._starts[i] + index - ends[i - 1]
        if index == -1 and ends:  # a row's last slot: the hot case, no bisect
            return self._starts[-1] + ends[-1] - (ends[-2] if len(ends) > 1 else 0) - 1
        n = ends[-1] if ends else 0
        if isinstance(index, slice):
            a, b, step = index.indices(n)
            if step != 1:
                return TokenRuns.from_ids(list(self)[index])
            if b <= a:
                return TokenRuns._raw([], [])
            if a == 0 and b == n and type(self) is TokenRuns:
                return self  # immutable: the whole of it is itself
            i = bisect_right(ends, a)
            j = bisect_left(ends, b, i)
            first = self._starts[i] + a - (ends[i - 1] if i else 0)
            if i == j:
                return TokenRuns._raw([first], [b - a])
            new_ends = [e - a for e in ends[i:j]] if a else ends[i:j]
            new_ends.append(b - a)
            starts = self._starts[i:j + 1]
            starts[0] = first
            return TokenRuns._raw(starts, new_ends)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("TokenRuns index out of range")
        i = bisect_right(ends, index)
        return self._starts[i] + index - (ends[i - 1] if i else 0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenRuns):
            return self._ends == other._ends and self._starts == other._starts
        if isinstance(other, list | tuple):
            if len(other) != len(self):
                return False
            kind = type(other)
            return all(other[b - n:b] == kind(range(s, s + n))
                       for (s, n), b in zip(self.runs(), self._ends))
        if isinstance(other, range):
            return list(other) == list(self)
        return NotImplemented

    def __hash__(self) -> int:
        # subtle: equal to a list or tuple of the same ints, but hashed only among TokenRuns
        if self._hash is None:
            self._hash = hash((tuple(self._starts), tuple(self._ends)))
        return self._hash

    def __repr__(self) -> str:
        runs = list(self.runs())
        more = f", ... {len(runs) - 8} more runs" if len(runs) > 8 else ""
        return f"{type(self).__name__}({runs[:8]}{more})"

    # ------------------------------------------------------------------ combining
    def __add__(self, other: Any) -> TokenRuns:
        if self.__class__ is TokenRuns and (other._ends == [] if other.__class__ in _RUNS
                                            else other.__class__ is list and not other):
            return self  # a prompt + no output yet (Req.all_ids): immutable, so itself
        if not isinstance(other, TokenRuns):
            if not isinstance(other, list | tuple | range):
                return NotImplemented
            other = TokenRuns.from_ids(other)
        starts, ends = list(self._starts), list(self._ends)
        _append_runs(starts, ends, other._starts, other._ends)
        return type(self)._raw(starts, ends)

    def __radd__(self, other: Any) -> TokenRuns:
        """list + runs: a mutable RunList (a list's + gives a list); tuple + runs: TokenRuns."""
        if not isinstance(other, list | tuple | range):
            return NotImplemented
        left = TokenRuns.from_ids(other)
        _append_runs(left._starts, left._ends, self._starts, self._ends)
        return (RunList if isinstance(other, list) else TokenRuns)._raw(left._starts, left._ends)

    def matches_at(self, pos: int, other: TokenRuns) -> bool:
        """self[pos:pos + len(other)] == other, without building the slice (the tree walk's
        compare of a whole edge); False when self ends first.

        >>> t = TokenRuns([(0, 10), (50, 5)])
        >>> t.matches_at(8, TokenRuns([(8, 2), (50, 3)])), t.matches_at(8, TokenRuns([(8, 3)]))
        (True, False)
        """
        ends, oends = self._ends, other._ends
        if not oends:
            return 0 <= pos <= len(self)
        m = oends[-1]
        if pos < 0 or not ends or pos + m > ends[-1]:
            return False
        starts, ostarts = self._starts, other._starts
        i = bisect_right(ends, pos)
        j, cur, done = 0, pos, 0
        base, obase = ends[i - 1] if i else 0, 0
        while done < m:  # piece by piece: both sides run consecutively within a piece
            if starts[i] + cur - base != ostarts[j] + done - obase:
                return False
            step = min(ends[i] - cur, oends[j] - done)
            cur += step
            done += step
            if cur == ends[i]:
                base = ends[i]
                i += 1
            if done == oends[j]:
                obase = oends[j]
                j += 1
        return True

    def values_at(self, pos: int, n: int) -> tuple[int, ...]:
        """tuple(self[pos:pos + n]) (a paged tree's child key), in one step when the n values
        lie in one run.

        >>> TokenRuns([(0, 4), (9, 4)]).values_at(2, 4)
        (2, 3, 9, 10)
        """
        ends = self._ends
        if pos < 0 or n < 0 or not ends or pos + n > ends[-1]:
            return tuple(self[pos:pos + n])
        starts = self._starts
        i = bisect_right(ends, pos)
        first = starts[i] + pos - (ends[i - 1] if i else 0)
        if pos + n <= ends[i]:
            return tuple(range(first, first + n))
        out = list(range(first, first + ends[i] - pos))  # across runs: piece by piece
        while len(out) < n:
            i += 1
            out.extend(range(starts[i], starts[i] + min(ends[i] - ends[i - 1], n - len(out))))
        return tuple(out)

    def common_prefix_len(self, other: Sequence[int]) -> int:
        """How many leading ints the two sequences share, in O(runs of both).

        >>> TokenRuns([(0, 100)]).common_prefix_len(TokenRuns([(0, 60), (500, 9)]))
        60
        """
        if not isinstance(other, TokenRuns):
            return plain_prefix(self, other)
        return runs_agree(self._starts, self._ends, other._starts, other._ends, 0,
                          min(len(self), len(other)))


class RunList(TokenRuns):
    """A mutable TokenRuns for a request's growing rows: append, extend, +=, slice assignment.
    Slices are immutable TokenRuns snapshots; a RunList is never hashed.

    >>> r = RunList(); r.append(5); r.append(6); r += [9]; r
    RunList([(5, 2), (9, 1)])
    >>> r[1:3] = [100, 101]; list(r)
    [5, 100, 101]
    """

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]

    def append(self, value: int) -> None:
        self.extend_run(value, 1)

    def extend_run(self, start: int, length: int) -> None:
        """Appends start, start + 1, ..., start + length - 1 in O(1)."""
        if length <= 0:
            return
        starts, ends = self._starts, self._ends
        if ends and starts[-1] + ends[-1] - (ends[-2] if len(ends) > 1 else 0) == start:
            ends[-1] += length
        else:
            starts.append(start)
            ends.append((ends[-1] if ends else 0) + length)

    def extend(self, values: Iterable[int]) -> None:
        if isinstance(values, range) and values.step == 1:
            self.extend_run(values.start, len(values))
            return
        if not isinstance(values, TokenRuns):
            values = TokenRuns.from_ids(values)
        _append_runs(self._starts, self._ends, values._starts, values._ends)

    def __iadd__(self, values: Iterable[int]) -> RunList:
        self.extend(values)
        return self

    def __setitem__(self, index: slice, values: Iterable[int]) -> None:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("RunList supports assignment to a contiguous slice only")
        a, b, _ = index.indices(len(self))
        if (isinstance(values, TokenRuns) and len(values) == max(b - a, 0)
                and self.matches_at(a, values)):
            return  # the same ints in place already (a checkpoint's row over the tree's own
            #        slots): nothing changes, no O(runs) copy of the whole row
        new = TokenRuns.concat([self[:a], list(values) if not isinstance(values, TokenRuns)
                                else values, self[max(a, b):]])
        self._starts, self._ends = new._starts, new._ends

    def clear(self) -> None:
        self._starts, self._ends = [], []


_RUNS = (TokenRuns, RunList)


def _append_runs(starts: list[int], ends: list[int], more_s: list[int], more_e: list[int]) -> None:
    """Appends canonical runs (more_s, more_e) to (starts, ends) in place, merging at the seam."""
    if not more_s:
        return
    base = ends[-1] if ends else 0
    k = 0
    if ends:
        last_len = ends[-1] - (ends[-2] if len(ends) > 1 else 0)
        if starts[-1] + last_len == more_s[0]:
            ends[-1] = base + more_e[0]
            k = 1
    starts.extend(more_s[k:])
    ends.extend(map(base.__add__, more_e[k:]) if base else more_e[k:])


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


Tokens = list[int] | TokenRuns  # the one token sequence, never mutated once made: radix/tokens/


def tokens(seq: Iterable[int]) -> Tokens:
    """The one token sequence (`Tokens`) of `seq`, picking the representation: runs (TokenRuns)
    for compact input, a list for plain ids (SGLang's own kind: its RadixKey holds a List[int]).
    Free for what is already `Tokens` (the same object back, no copy), so it is called where a
    sequence comes in (a trace line, a request, a RadixKey) and everything after passes the same
    object on; that list is never mutated again (radix/tokens/). Anything else (a tuple, a
    range, an array) is converted once; a RunList (mutable) is frozen, never expanded per token.

    >>> tokens((1, 2)), tokens(RunList([(4, 2)]))
    ([1, 2], TokenRuns([(4, 2)]))
    >>> t = [5, 6, 7]; tokens(t) is t
    True
    """
    if seq.__class__ is list or seq.__class__ is TokenRuns:
        return seq
    if isinstance(seq, TokenRuns):
        return TokenRuns._raw(list(seq._starts), list(seq._ends))
    return list(seq)


def head(seq: Tokens, n: int) -> Tokens:
    """seq[:n] for n >= 0, and seq itself when that is all of it (a list's slice would copy; a
    `Tokens` list is never mutated, so the whole can be shared).

    >>> t = [1, 2, 3]; head(t, 3) is t, head(t, 9) is t, head(t, 2)
    (True, True, [1, 2])
    """
    return seq if n >= len(seq) else seq[:n]


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


# The common-prefix walks: two plain sequences (gallop_match, plain_prefix), two run lists
# (runs_agree, TokenRuns' starts and ends), and the tree's in-place check of a long first edge
# (PrefixProbe).


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
    """Common prefix of two sequences of any kind, compared as they are when both are lists
    (or both tuples), else as lists.

    >>> plain_prefix((1, 2, 3), range(1, 9)), plain_prefix((1, 2, 3), (1, 2))
    (3, 2)
    """
    if a.__class__ is b.__class__ and (a.__class__ is tuple or a.__class__ is list):
        return gallop_match(a, b)
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
    """Answers `tok[:len(edge)] == edge` for two lists (or tuples) in one C scan, without
    slicing `tok`.

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

    def guard(self, edge: Sequence[int]) -> Sequence:
        """edge followed by the probe, of edge's kind (list or tuple): what `starts_with` scans
        against (a sequence of the same kind as tok)."""
        return edge + (self,) if edge.__class__ is tuple else edge + [self]

    def starts_with(self, tok: Sequence[int], guarded: Sequence) -> bool:
        """tok[:len(guarded) - 1] == guarded[:-1], for len(tok) >= len(guarded)."""
        self.reached = False
        _ = tok < guarded  # the result is meaningless; whether the scan reached us is not
        return self.reached

    def __eq__(self, other: object) -> bool:
        self.reached = True
        return True  # equal: the scan then ends (guarded has no more items) without ordering us

    __hash__ = None


# ------------------------------------------------------------------------- the prefix trie
# A namespaced prefix trie over token sequences, in units of `unit` tokens, that never splits.
#
# Each node is a run of unit positions [d0, d1) along the `content` of the sequence that created
# it; a later sequence that leaves it at position p hangs its own node there, keyed by (p, the
# unit's tokens), even in the middle of the edge. So a position, once known, keeps its node for
# ever: the block cache's extent storage (ExtentPool, manager.py) files its carriers and eviction
# marks on them, the explainer (radix/runs/explain.py) records what was ever cached, the hash
# memo (radix/blocks/hashing.py) keeps each node's hashes, the host tier counts its losses on it.
# Walks cost O(nodes x runs).


class TrieNode:
    """Unit positions [d0, d1) of `content`'s chain; children keyed (position, unit tokens)."""

    __slots__ = ("content", "d0", "d1", "children", "depths", "parent", "owner", "carriers",
                 "marks")

    def __init__(self, content: Sequence[int], d0: int, d1: int, parent: TrieNode | None,
                 owner: Any = None) -> None:
        self.content = content  # a sequence whose first d1 units are this node's chain
        self.d0, self.d1 = d0, d1
        self.children: dict[tuple[int, Hashable], TrieNode] = {}
        # the three below start as a shared () and become a set or list at their first item:
        # most nodes never get one, and each empty container would be one more object for the
        # cyclic collector to scan (an explainer run makes ~120,000 nodes)
        self.depths: set[int] | tuple = ()  # positions some child hangs at (skips building keys)
        self.parent = parent
        self.owner = owner  # who may extend it in place (the sequence that created it)
        self.carriers: list[Any] | tuple = ()  # ExtentPool: segments of blocks caching these
        self.marks: list[tuple[int, int, Any]] | tuple = ()  # (lo, hi, what), in time order

    def add_carrier(self, segment: Any) -> None:
        if self.carriers:
            self.carriers.append(segment)
        else:
            self.carriers = [segment]

    def add_mark(self, lo: int, hi: int, what: Any) -> None:
        """Annotates positions [lo, hi) with `what` (marks are read newest first)."""
        if self.marks:
            self.marks.append((lo, hi, what))
        else:
            self.marks = [(lo, hi, what)]

    def __repr__(self) -> str:
        return f"TrieNode([{self.d0}, {self.d1}), {len(self.children)} children)"


class Walk(NamedTuple):
    pieces: list[tuple[TrieNode, int, int]]  # (node, lo, hi) covering [0, pos), in order
    node: TrieNode | None  # where the walk stopped (None: an unknown namespace)
    pos: int  # units known from the start


def _cut(walk: Walk, limit: int) -> Walk:
    """The part of a walk below `limit`."""
    pieces = [(n, a, min(b, limit)) for n, a, b in walk.pieces if a < limit]
    return Walk(pieces, pieces[-1][0] if pieces else walk.node, limit)


class PrefixTrie:
    """Sequences by namespace; `walk` finds how far a sequence is known, `insert` records it.

    >>> t = PrefixTrie(unit=2)
    >>> _ = t.insert([1, 2, 3, 4, 5, 6], None, 3)  # three units
    >>> [(n.d0, a, b) for n, a, b in t.insert([1, 2, 3, 4, 9, 9], None, 3).pieces]
    [(0, 0, 2), (2, 2, 3)]
    >>> t.known([1, 2, 3, 4, 9, 9, 7, 7], None, 4), t.known([1, 2], "tenant-b", 1)
    (3, 0)
    """

    def __init__(self, unit: int = 1) -> None:
        if unit < 1:
            raise ValueError(f"unit must be >= 1, got {unit}")
        self.unit = unit
        self.roots: dict[Hashable, TrieNode] = {}
        self.num_nodes = 0

    def key(self, tokens: Sequence[int], pos: int) -> Hashable:
        """The tokens of unit `pos`: an int, or the unit's runs (the same for a plain list and
        a TokenRuns of equal tokens)."""
        u = self.unit
        if u == 1:
            return tokens[pos]
        block = tokens[pos * u:(pos + 1) * u]
        return block if isinstance(block, TokenRuns) else TokenRuns.from_ids(block)

    def walk(self, tokens: Sequence[int], ns: Hashable, limit: int, resume: Walk | None = None
             ) -> Walk:
        """How far the first `limit` units of `tokens` are known: the pieces (node, lo, hi) in
        order covering [0, reached), the node the walk ended in, reached. `resume`: an earlier
        walk of a prefix of the same sequence (the trie only grows, so it is still true)."""
        if resume is None or resume.node is None:  # (no root then: there may be one now)
            pieces: list[tuple[TrieNode, int, int]] = []
            node, pos = self.roots.get(ns), 0
        else:
            if resume.pos >= limit:
                return _cut(resume, limit)
            pieces, node, pos = list(resume.pieces), resume.node, resume.pos
        u = self.unit
        if tokens.__class__ in _RUNS and limit * u <= tokens.__len__():
            node, pos = _walk_runs(self, tokens, pieces, node, pos, limit)
            return Walk(pieces, node, pos)
        while node is not None and pos < limit:
            end = min(node.d1, limit)
            if pos < end:
                same = common_prefix_from(tokens, node.content, pos * u, end * u) // u
                if same:
                    if pieces and pieces[-1][0] is node:  # resumed inside the same node
                        pieces[-1] = (node, pieces[-1][1], pos + same)
                    else:
                        pieces.append((node, pos, pos + same))
                    pos += same
                if pos == limit:
                    break
            if pos not in node.depths:
                break
            child = node.children.get((pos, self.key(tokens, pos)))
            if child is None:
                break
            node = child
        return Walk(pieces, node, pos)

    def known(self, tokens: Sequence[int], ns: Hashable, limit: int) -> int:
        """Units of `tokens` (at most `limit`) the trie already holds from the start."""
        if tokens.__class__ in _RUNS and limit * self.unit <= tokens.__len__():
            return _walk_runs(self, tokens, None, self.roots.get(ns), 0, limit)[1]
        return self.walk(tokens, ns, limit).pos

    def insert(self, tokens: Sequence[int], ns: Hashable, limit: int, owner: Any = None,
               resume: Walk | None = None) -> Walk:
        """Records the first `limit` units of `tokens`; returns the walk covering [0, limit).
        A node created by the same `owner` that ends where the walk stops grows in place."""
        walk = self.walk(tokens, ns, limit, resume)
        pieces, node, pos = walk
        if pos >= limit:
            return walk
        if node is None:
            node = self.roots[ns] = TrieNode((), 0, 0, None)
        if owner is not None and node.owner is owner and pos == node.d1:
            node.d1, node.content = limit, tokens  # the same sequence, grown: extend in place
            if pieces and pieces[-1][0] is node:
                pieces[-1] = (node, pieces[-1][1], limit)
            else:
                pieces.append((node, pos, limit))
            return Walk(pieces, node, limit)
        child = TrieNode(tokens, pos, limit, node, owner)
        node.children[(pos, self.key(tokens, pos))] = child
        if node.depths:
            node.depths.add(pos)
        else:
            node.depths = {pos}
        self.num_nodes += 1
        pieces.append((child, pos, limit))
        return Walk(pieces, child, limit)

    def nodes(self):
        """Every node, parents before children."""
        stack = list(self.roots.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())


def _walk_runs(trie: PrefixTrie, tokens: TokenRuns, pieces: list | None, node: TrieNode | None,
               pos: int, limit: int) -> tuple[TrieNode | None, int]:
    """PrefixTrie.walk's loop for compact tokens (limit * unit <= len(tokens)): the same steps,
    with `common_prefix_from` and runs_agree inlined against runs contents and each unit's
    first token read from the runs (the explainer walks ~370,000 times on the conversation
    stand-in). Appends to `pieces` (None: only how far); returns (node, pos)."""
    u = trie.unit
    ts, te = tokens._starts, tokens._ends
    while node is not None and pos < limit:
        end = node.d1 if node.d1 < limit else limit
        if pos < end:
            c = node.content
            if c.__class__ is TokenRuns or c.__class__ is RunList:
                cs, ce = c._starts, c._ends
                start, stop = pos * u, end * u
                clen = ce[-1] if ce else 0
                if clen < stop:
                    stop = clen
                p = start
                if p < stop:  # runs_agree(ts, te, cs, ce, start, stop), inlined
                    i, j = bisect_right(te, p), bisect_right(ce, p)
                    a0 = te[i - 1] if i else 0
                    b0 = ce[j - 1] if j else 0
                    while p < stop:
                        if ts[i] - a0 != cs[j] - b0:
                            break
                        ai, bj = te[i], ce[j]
                        p = ai if ai < bj else bj
                        if stop < p:
                            p = stop
                        if p == ai:
                            a0 = p
                            i += 1
                        if p == bj:
                            b0 = p
                            j += 1
                same = (p - start) // u
            else:
                same = common_prefix_from(tokens, c, pos * u, end * u) // u
            if same:
                if pieces is not None:
                    if pieces and pieces[-1][0] is node:  # resumed inside the same node
                        pieces[-1] = (node, pieces[-1][1], pos + same)
                    else:
                        pieces.append((node, pos, pos + same))
                pos += same
            if pos == limit:
                break
        if pos not in node.depths:
            break
        if u == 1:
            k = bisect_right(te, pos)
            key = ts[k] + pos - (te[k - 1] if k else 0)
        else:
            key = trie.key(tokens, pos)
        child = node.children.get((pos, key))
        if child is None:
            break
        node = child
    return node, pos
