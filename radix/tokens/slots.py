"""`RunAllocator`: KV slots handed out as runs, for compact (Mooncake) requests.

The same calls as radix/allocator.py's SlotAllocator (alloc, alloc_extend, free, available_size)
and the same accounting, tokens or (page_size > 1) whole pages, as SGLang's paged allocator: a
row continues its last page first, a free releases every page it touches. Ids are names only,
never reused; each run keeps room after it so the row it starts grows in place, as one run.
Follows nothing upstream for the ids. Leaves out: reusing ids (capacity is a count).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from radix.tokens.runs import TokenRuns


class RunAllocator:
    """`alloc(n)` hands out one run of n fresh ids as a TokenRuns, so a 40,000-token prefill is
    one (start, length) pair, never 40,000 ints; `alloc_extend(last, n)` / `next_after(last, n)`
    continue a row in place. With check=True (the default) the pages in use are kept as sorted
    intervals, and a free of slots not in use (or freed twice) raises.

    >>> a = RunAllocator(10); a.alloc(4), a.alloc(3), a.available_size()
    (TokenRuns([(1, 4)]), TokenRuns([(2097157, 3)]), 3)
    >>> a.alloc_extend(4, 2), a.available_size()  # the first row continues: 5, 6
    (TokenRuns([(5, 2)]), 1)
    >>> a.free(TokenRuns([(2, 2)])); a.available_size()
    3

    Paged: 3 tokens take a page of 4; the row then continues inside it for free.
    >>> p = RunAllocator(12, page_size=4); r = p.alloc(3); r, p.available_size()
    (TokenRuns([(4, 3)]), 8)
    >>> p.alloc_extend(6, 2), p.available_size()  # 7 fills the page, 8 opens the next
    (TokenRuns([(7, 2)]), 4)
    """

    GAP = 1 << 21  # ids kept free after each run (more than any output: MAX_OUTPUT_LEN)

    def __init__(self, size: int, check: bool = True, page_size: int = 1) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.size, self.check, self.page_size = size, check, page_size
        self.num_pages = size // page_size
        self._next = page_size  # where the next run starts (page 0 is SGLang's padding)
        self._pages_used = 0
        # pages counted as taken by decode steps whose slots are not handed out yet (the
        # scheduler's DecodeLedger, radix/sched/ledger.py, settles them row by row)
        self.deferred_pages = 0
        self._starts: list[int] = []  # each run's first id, ascending
        self._cursor: list[int] = []  # each run's next id to hand out (its row's end)
        self._lo: list[int] = []  # pages in use as intervals [lo, hi), sorted (check mode)
        self._hi: list[int] = []

    def available_size(self) -> int:
        """Free tokens: free pages * page_size."""
        return (self.num_pages - self._pages_used - self.deferred_pages) * self.page_size

    @property
    def num_used(self) -> int:
        return (self._pages_used + self.deferred_pages) * self.page_size

    def alloc(self, num_tokens: int) -> TokenRuns | None:
        """One run of `num_tokens` fresh ids (whole pages), or None when too few are free."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        ps = self.page_size
        pages = -(-num_tokens // ps)
        if pages > self.num_pages - self._pages_used - self.deferred_pages:
            return None
        if not num_tokens:
            return TokenRuns()
        start = self._next
        self._next += -(-(num_tokens + self.GAP) // ps) * ps  # the next run: page aligned
        self._starts.append(start)
        self._cursor.append(start + num_tokens)
        self._take(start // ps, pages)
        return TokenRuns([(start, num_tokens)])

    def alloc_extend(self, last_slot: int | None, num_tokens: int) -> TokenRuns | None:
        """`num_tokens` ids continuing a row whose last id is `last_slot`: in place (its last
        page first) when its run has room there, else a fresh run; None when short."""
        first = None if last_slot is None else self.next_after(last_slot, num_tokens)
        if first is None:
            return self.alloc(num_tokens)
        return TokenRuns([(first, num_tokens)])

    def can_continue(self, last_slot: int, num_tokens: int) -> bool:
        """Whether a row ending at `last_slot` is its run's end, with room for `num_tokens`
        more in place (free pages aside)."""
        i = bisect_right(self._starts, last_slot) - 1
        return (i >= 0 and self._cursor[i] == last_slot + 1
                and last_slot + num_tokens < self._starts[i] + self.GAP)

    def next_after(self, last_slot: int, num_tokens: int = 1) -> int | None:
        """The first of `num_tokens` ids continuing a row whose last id is `last_slot` in place
        (they are last_slot + 1 ...); None when it cannot continue in place or pages are short."""
        i = bisect_right(self._starts, last_slot) - 1
        if (i < 0 or self._cursor[i] != last_slot + 1
                or last_slot + num_tokens >= self._starts[i] + self.GAP):
            return None
        ps = self.page_size
        first_new = -(-(last_slot + 1) // ps)  # pages below it are in use already
        pages = -(-(last_slot + 1 + num_tokens) // ps) - first_new
        if pages > self.num_pages - self._pages_used - self.deferred_pages:
            return None
        self._cursor[i] += num_tokens
        self._take(first_new, pages)
        return last_slot + 1

    def _take(self, page: int, n: int) -> None:
        self._pages_used += n
        if self.check and n:
            i = bisect_right(self._lo, page) - 1
            if i >= 0 and self._hi[i] == page:
                self._hi[i] = page + n  # continues an interval in use
            else:
                self._lo.insert(i + 1, page)
                self._hi.insert(i + 1, page + n)

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots (a TokenRuns or plain ints): every page they touch, once; with check
        on, pages not in use raise ValueError."""
        runs = slot_ids if isinstance(slot_ids, TokenRuns) else TokenRuns.from_ids(slot_ids)
        ps = self.page_size
        pages = TokenRuns.concat([TokenRuns([(a // ps, (a + n - 1) // ps - a // ps + 1)])
                                  for a, n in runs.runs()]) if ps > 1 else runs
        spans = sorted(pages.runs())
        merged: list[list[int]] = []
        for a, n in spans:  # a page touched by two runs is released once
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], a + n)
            else:
                merged.append([a, a + n])
        if self.check:
            for a, b in merged:
                self._release(a, b)
        self._pages_used -= sum(b - a for a, b in merged)

    def _release(self, a: int, b: int) -> None:
        i = bisect_right(self._lo, a) - 1
        if i < 0 or self._hi[i] < b:
            what = "slots" if self.page_size == 1 else "pages"
            raise ValueError(f"free of {what} not in use (or freed twice): {a}..{b - 1}")
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
        assert 0 <= self._pages_used <= self.num_pages, "used outside 0..num_pages"
        if self.check:
            held = sum(h - lo for lo, h in zip(self._lo, self._hi))
            assert held == self._pages_used, "in-use intervals disagree with the count"
            assert all(h <= lo for h, lo in zip(self._hi, self._lo[1:])), "intervals overlap"
