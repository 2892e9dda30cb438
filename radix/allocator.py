"""A KV slot allocator without KV: hands out integer slot ids (SGLang's token_to_kv_pool_allocator).

The caches and the simulator use this one; `engine/kv_pool.py` implements the same three calls
over real tensors. Deterministic: frees go to the back, allocation takes from the front.
`RunAllocator` hands out runs of ids for compact (Mooncake) requests.
Leaves out: paged allocation (page_size > 1 uses the same per-token ids here).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Protocol

from radix.tokens import TokenRuns


class Allocator(Protocol):
    def alloc(self, num_tokens: int) -> list[int] | None: ...
    def free(self, slot_ids: Sequence[int]) -> None: ...
    def available_size(self) -> int: ...


class SlotAllocator:
    """Slots 1..size (SGLang reserves slot 0 for padding); never-used slots go out first, in
    order, then freed ones in the order they were freed. Memory is O(slots handed out).
    With check=True (the default) a double free or a free of a slot never handed out raises;
    check=False skips that bookkeeping, as SGLang's allocator does (for benchmarks).

    >>> a = SlotAllocator(4); a.alloc(3)
    [1, 2, 3]
    >>> a.free([2]); a.available_size()
    2
    >>> a.alloc(2)
    [4, 2]
    """

    def __init__(self, size: int, check: bool = True) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        self.size = size
        self.check = check
        self._next_fresh = 1  # slots >= this were never handed out
        self._free: list[int] = []  # freed slots; the live queue is _free[_head:]
        self._head = 0
        self._in_use: set[int] = set()  # kept only when check is on
        self._num_used = 0

    def available_size(self) -> int:
        return self.size - self._num_used

    def alloc(self, num_tokens: int) -> list[int] | None:
        """Takes `num_tokens` slots, or returns None (nothing taken) when too few are free."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        if num_tokens > self.size - self._num_used:
            return None
        fresh = min(num_tokens, self.size + 1 - self._next_fresh)
        out = list(range(self._next_fresh, self._next_fresh + fresh))
        self._next_fresh += fresh
        rest = num_tokens - fresh
        if rest:
            out += self._free[self._head : self._head + rest]
            self._head += rest
            if self._head > 4096 and self._head * 2 > len(self._free):
                del self._free[: self._head]  # compact the consumed front
                self._head = 0
        self._num_used += num_tokens
        if self.check:
            self._in_use.update(out)
        return out

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots; with check on, freeing a slot that is not in use raises ValueError."""
        if not self.check:
            self._num_used -= len(slot_ids)
            self._free.extend(slot_ids)
            return
        ids = list(slot_ids)
        as_set = set(ids)
        if len(as_set) != len(ids) or not as_set <= self._in_use:  # set ops run in C
            bad = [s for s in ids if s not in self._in_use] or ids
            raise ValueError(f"free of slots not in use (or freed twice): {bad[:8]}")
        self._in_use -= as_set
        self._num_used -= len(ids)
        self._free += ids

    @property
    def num_used(self) -> int:
        return self._num_used

    def check_invariants(self) -> None:
        num_free = len(self._free) - self._head + self.size + 1 - self._next_fresh
        assert num_free + self._num_used == self.size, "free + used != pool size"
        if self.check:
            assert len(self._in_use) == self._num_used, "in-use set disagrees with the count"
            assert not self._in_use.intersection(self._free[self._head :]), "slot free and used"


class RunAllocator:
    """Slots as runs, for compact requests (radix/tokens.py): `alloc(n)` hands out one run of
    n fresh ids as a TokenRuns, so a 40,000-token prefill is one (start, length) pair, never
    40,000 ints. Ids are names only, never reused; capacity is a count, as in SlotAllocator.
    Each run keeps GAP unused ids after it, so the row it starts can continue in place
    (`alloc_extend`, as a paged allocator continues a row's last page): a request's decode
    slots stay one run. With check=True (the default) the ids in use are kept as sorted
    intervals, and a free of ids not in use (or freed twice) raises.

    >>> a = RunAllocator(10); a.alloc(4), a.alloc(3), a.available_size()
    (TokenRuns([(1, 4)]), TokenRuns([(2097157, 3)]), 3)
    >>> a.alloc_extend(4, 2), a.available_size()  # the first row continues: 5, 6
    (TokenRuns([(5, 2)]), 1)
    >>> a.free(TokenRuns([(2, 2)])); a.available_size()
    3
    """

    GAP = 1 << 21  # ids kept free after each run (more than any output: MAX_OUTPUT_LEN)

    def __init__(self, size: int, check: bool = True) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        self.size = size
        self.check = check
        self._next = 1  # where the next run starts (0 is SGLang's padding slot)
        self._num_used = 0
        self._starts: list[int] = []  # each run's first id, ascending
        self._cursor: list[int] = []  # each run's next id to hand out (its row's end)
        self._lo: list[int] = []  # in-use intervals [lo, hi), sorted (check mode only)
        self._hi: list[int] = []

    def available_size(self) -> int:
        return self.size - self._num_used

    @property
    def num_used(self) -> int:
        return self._num_used

    def alloc(self, num_tokens: int) -> TokenRuns | None:
        """One run of `num_tokens` fresh ids, or None (nothing taken) when too few are free."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        if num_tokens > self.size - self._num_used:
            return None
        if not num_tokens:
            return TokenRuns()
        start = self._next
        self._next += num_tokens + self.GAP
        self._starts.append(start)
        self._cursor.append(start + num_tokens)
        self._take(start, num_tokens)
        return TokenRuns([(start, num_tokens)])

    def alloc_extend(self, last_slot: int | None, num_tokens: int) -> TokenRuns | None:
        """`num_tokens` ids continuing a row whose last id is `last_slot`: right after it when
        its run still has room there, else a fresh run. None when too few are free."""
        if last_slot is None or num_tokens > self.size - self._num_used:
            return self.alloc(num_tokens)
        i = bisect_right(self._starts, last_slot) - 1
        if (i < 0 or self._cursor[i] != last_slot + 1
                or last_slot + num_tokens >= self._starts[i] + self.GAP):
            return self.alloc(num_tokens)
        self._cursor[i] += num_tokens
        self._take(last_slot + 1, num_tokens)
        return TokenRuns([(last_slot + 1, num_tokens)])

    def next_after(self, last_slot: int, num_tokens: int = 1) -> int | None:
        """The first of `num_tokens` ids continuing a row whose last id is `last_slot` in place
        (as alloc_extend, without building a TokenRuns: they are last_slot + 1 ...); None when
        the row cannot continue in place or the pool is short (then use alloc_extend)."""
        i = bisect_right(self._starts, last_slot) - 1
        if (i < 0 or self._cursor[i] != last_slot + 1
                or num_tokens > self.size - self._num_used
                or last_slot + num_tokens >= self._starts[i] + self.GAP):
            return None
        self._cursor[i] += num_tokens
        self._take(last_slot + 1, num_tokens)
        return last_slot + 1

    def _take(self, start: int, n: int) -> None:
        self._num_used += n
        if self.check and n:
            i = bisect_right(self._lo, start) - 1
            if i >= 0 and self._hi[i] == start:
                self._hi[i] = start + n  # continues an interval in use
            else:
                self._lo.insert(i + 1, start)
                self._hi.insert(i + 1, start + n)

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns ids (a TokenRuns or plain ints); with check on, ids not in use raise."""
        runs = slot_ids if isinstance(slot_ids, TokenRuns) else TokenRuns.from_ids(slot_ids)
        if self.check:
            for start, length in runs.runs():
                self._release(start, start + length)
        self._num_used -= len(runs)

    def _release(self, a: int, b: int) -> None:
        i = bisect_right(self._lo, a) - 1
        if i < 0 or self._hi[i] < b:
            raise ValueError(f"free of slots not in use (or freed twice): {a}..{b - 1}")
        lo, hi = self._lo[i], self._hi[i]
        if lo == a and hi == b:
            del self._lo[i], self._hi[i]
        elif lo == a:
            self._lo[i] = b
        elif hi == b:
            self._hi[i] = a
        else:  # a hole in the middle: split the interval
            self._hi[i] = a
            self._lo.insert(i + 1, b)
            self._hi.insert(i + 1, hi)

    def check_invariants(self) -> None:
        assert 0 <= self._num_used <= self.size, "used outside 0..size"
        if self.check:
            held = sum(h - lo for lo, h in zip(self._lo, self._hi))
            assert held == self._num_used, "in-use intervals disagree with the count"
            assert all(h <= lo for h, lo in zip(self._hi, self._lo[1:])), "intervals overlap"
