"""A request and the KV slots it holds: SGLang's `Req` (srt/managers/schedule_batch.py) as the
caches see it, and the slot allocator that fills its row (SGLang's token_to_kv_pool_allocator).

`Req` keeps only the fields that `cache_finished_req` / `cache_unfinished_req` and the
schedulers read or write; its `slot_ids` plays SGLang's `req_to_token_pool.req_to_token` row:
the KV slot of every token position computed so far. `SlotAllocator` hands out those slots as
integer ids, without KV; the caches, the simulator and engine/kv_pool.py (over real tensors)
use this one class. Its accounting is one: tokens, or (page_size > 1) whole pages as SGLang's
PagedTokenToKVPoolAllocator (a row continues its last page first, a free releases every page it
touches). How the pages' ids are named is one of two small objects behind it: `FreeListIds`
(runs=False) hands out lists of ids from a free list (deterministic: frees go to the back,
allocation takes from the front), `FreshRuns` (runs=True) runs of fresh ids as TokenRuns for
compact (Mooncake) requests, never reused, each with room to grow in place.
Leaves out: sampling parameters, streaming state, speculative decoding; SGLang's sorted free
list (pages come back in the order they were freed).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from radix.tokens.runs import TokenRuns, Tokens, tokens


@dataclass(eq=False)
class Req:
    rid: str  # request id, unique in a run
    origin_input_ids: Tokens  # the prompt's token ids: converted once when the request is made
    # (a trace's prompt, already `Tokens`, is kept as it is: radix/tokens/)
    output_ids: list[int] = field(default_factory=list)  # generated so far
    max_new_tokens: int = 16  # output_len of a trace line
    extra_key: str | None = None  # namespace: LoRA id etc.; different keys never share a node
    cache_salt: str | None = None  # per-tenant salt; also a namespace
    priority: int = 0  # larger is more important (SGLang's priority scheduling)
    arrival: float = 0.0  # seconds, from the trace
    routing_key: str | None = None  # groups requests for the routing-key schedule policy
    # --- cache state, written by the scheduler and the cache ---
    slot_ids: list[int] = field(default_factory=list)  # KV slot per computed token position
    prefix_indices: list[int] = field(default_factory=list)  # prefix slots reused at admission
    # Tokens at the front whose KV belongs to the tree (locked through last_node). Equals
    # len(prefix_indices) except with page_size > 1 after a chunk, when prefix_indices also holds
    # the request's own partial page (SGLang keeps the two apart for exactly that reason).
    cache_protected_len: int = 0
    # This request already inserted [0, cache_inserted_len) into the tree: a later insert counts
    # a hit only on nodes that end past it (SGLang 0.5.23's ReqKvInfo.cache_inserted_len).
    cache_inserted_len: int = 0
    last_node: Any = None  # TreeNode locked on this request's behalf, or None
    fill_ids: Tokens = field(default_factory=list)  # tokens computed by the end of this chunk
    # (all_ids or a slice of it: never mutated)
    metrics: dict[str, float] = field(default_factory=dict)  # ttft, matched, prefilled, ...

    def __post_init__(self) -> None:
        self.origin_input_ids = tokens(self.origin_input_ids)

    @property
    def all_ids(self) -> Tokens:
        """The prompt and the output so far, one `Tokens` (the prompt itself while there is no
        output: a key over it shares the prompt's storage)."""
        out = self.output_ids
        return self.origin_input_ids + out if out else self.origin_input_ids

    @property
    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new_tokens


class Allocator(Protocol):
    def alloc(self, num_tokens: int) -> list[int] | None: ...
    def free(self, slot_ids: Sequence[int]) -> None: ...
    def available_size(self) -> int: ...


class SlotAllocator:
    """Slots 1..size (SGLang reserves slot 0 for padding). Lists of ids (the default):
    never-used slots go out first, in order, then freed ones in the order they were freed;
    memory is O(slots handed out). With check=True (the default) a double free or a free of a
    slot never handed out raises; check=False skips that bookkeeping, as SGLang's allocator does.

    >>> a = SlotAllocator(4); a.alloc(3)
    [1, 2, 3]
    >>> a.free([2]); a.available_size()
    2
    >>> a.alloc(2)
    [4, 2]

    Paged (page 0 is the padding page): 3 tokens take one whole page of 4, and a row whose last
    slot is 6 continues in its page (7) before it takes a new one (12..).
    >>> p = SlotAllocator(12, page_size=4); p.alloc(3), p.available_size()
    ([4, 5, 6], 8)
    >>> p.alloc_extend(6, 3), p.available_size()
    ([7, 8, 9], 4)

    Runs: `alloc(n)` is one run of n fresh ids, so a 40,000-token prefill is one (start, length)
    pair, never 40,000 ints; ids are names only (capacity is the count), and the next run starts
    GAP ids later so that a row grows in place (`alloc_extend`, `next_after`) as one run.
    >>> r = SlotAllocator(10, runs=True); r.alloc(4), r.alloc(3), r.available_size()
    (TokenRuns([(1, 4)]), TokenRuns([(2097157, 3)]), 3)
    >>> r.alloc_extend(4, 2), r.available_size()  # the first row continues: 5, 6
    (TokenRuns([(5, 2)]), 1)
    >>> r.free(TokenRuns([(2, 2)])); r.available_size()
    3
    """

    GAP = 1 << 21  # runs: ids kept free after each run (more than any output: MAX_OUTPUT_LEN)

    def __init__(self, size: int, check: bool = True, page_size: int = 1,
                 runs: bool = False) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.size, self.check, self.page_size, self.runs = size, check, page_size, runs
        self.num_pages = size // page_size  # SGLang: size // page_size, pages 1..num_pages
        self.used_pages = 0  # pages handed out (whole: a partly used page is used)
        # pages counted as taken by decode steps whose slots are not handed out yet (the
        # scheduler's DecodeLedger, radix/sched/ledger.py, settles them row by row)
        self.deferred_pages = 0
        # how the pages' slots are named: one of the two objects below, asked by every method
        self._ids: FreeListIds | FreshRuns = (FreshRuns if runs else FreeListIds)(self)

    def available_size(self) -> int:
        """Free tokens: free pages * page_size (a partly used page counts as used)."""
        return (self.num_pages - self.used_pages - self.deferred_pages) * self.page_size

    @property
    def num_used(self) -> int:
        """Tokens in use (whole pages)."""
        return (self.used_pages + self.deferred_pages) * self.page_size

    def alloc(self, num_tokens: int) -> list[int] | TokenRuns | None:
        """Takes `num_tokens` slots (whole pages: the rest of the last page stays reserved to
        the caller, for `alloc_extend`), or returns None (nothing taken) when too few are free."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        num_pages = -(-num_tokens // self.page_size)
        if num_pages > self.num_pages - self.used_pages - self.deferred_pages:
            return None
        self.used_pages += num_pages
        return self._ids.take(num_tokens, num_pages)

    def alloc_extend(self, last_slot: int | None,
                     num_tokens: int) -> list[int] | TokenRuns | None:
        """`num_tokens` slots continuing a row whose last slot is `last_slot` (None: empty row):
        the free rest of that slot's page first, then new pages (SGLang's alloc_extend and
        alloc_decode; runs: in place when the row's run has room, else a fresh run); None
        (nothing taken) when too few pages are free."""
        return self._ids.extend(last_slot, num_tokens)

    def can_continue(self, last_slot: int, num_tokens: int) -> bool:
        """Runs: whether a row ending at `last_slot` is its run's end, with room for
        `num_tokens` more in place (free pages aside). Lists of ids: False."""
        return self._ids.can_continue(last_slot, num_tokens)

    def next_after(self, last_slot: int, num_tokens: int = 1) -> int | None:
        """Runs: the first of `num_tokens` ids continuing a row whose last id is `last_slot` in
        place (they are last_slot + 1 ...), taken; None when it cannot continue in place or pages
        are short (always, for lists of ids)."""
        return self._ids.next_after(last_slot, num_tokens)

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots (runs: a TokenRuns or plain ints; paged: every page they touch, once);
        with check on, freeing a slot that is not in use raises ValueError."""
        self._ids.free(slot_ids)

    def check_invariants(self) -> None:
        assert 0 <= self.used_pages <= self.num_pages, "used outside 0..num_pages"
        self._ids.check_invariants()


class FreeListIds:
    """Lists of ids: pages never used yet go out first, in order, then the freed ones, oldest
    first (deterministic: frees go to the back of a queue). With check on, the pages in use are
    a set, so a double free or a stray id raises."""

    def __init__(self, pool: SlotAllocator) -> None:
        self.pool = pool  # the page accounting: used_pages, deferred_pages
        self.page_size, self.check, self.num_pages = pool.page_size, pool.check, pool.num_pages
        self.next_fresh = 1  # pages >= this were never handed out
        self.queue: list[int] = []  # freed pages: the live queue is queue[head:]
        self.head = 0
        self.in_use: set[int] = set()  # check: the pages in use

    def take(self, num_tokens: int, num_pages: int) -> list[int]:
        """`num_pages` pages (counted by the pool already) as `num_tokens` slot ids."""
        fresh = min(num_pages, self.num_pages + 1 - self.next_fresh)
        pages = shared_ids(self.next_fresh, self.next_fresh + fresh) if fresh else []
        self.next_fresh += fresh
        rest = num_pages - fresh
        if rest:
            freed = self.queue[self.head : self.head + rest]
            if fresh:
                pages += freed
            else:  # (the freed pages alone: no second copy)
                pages = freed
            self.head += rest
            if self.head > 4096 and self.head * 2 > len(self.queue):
                del self.queue[: self.head]  # compact the consumed front
                self.head = 0
        if self.check:
            self.in_use.update(pages)
        ps = self.page_size
        if ps == 1:
            return pages
        ids: list[int] = []
        for p in pages:
            ids += shared_ids(p * ps, p * ps + ps)
        del ids[num_tokens:]  # the last page's rest stays reserved to the caller
        return ids

    def extend(self, last_slot: int | None, num_tokens: int) -> list[int] | None:
        """The free rest of `last_slot`'s page, then new pages."""
        ps = self.page_size
        if ps == 1 or last_slot is None or (last_slot + 1) % ps == 0:
            return self.pool.alloc(num_tokens)
        if self.check and last_slot // ps not in self.in_use:
            raise ValueError(f"slot {last_slot} lies in a page that is not in use")
        fill = min(num_tokens, ps - (last_slot + 1) % ps)
        rest = self.pool.alloc(num_tokens - fill)
        if rest is None:
            return None
        return shared_ids(last_slot + 1, last_slot + 1 + fill) + rest

    def can_continue(self, last_slot: int, num_tokens: int) -> bool:
        return False  # a list of ids never grows in place

    def next_after(self, last_slot: int, num_tokens: int = 1) -> None:
        return None

    def free(self, slot_ids: Sequence[int]) -> None:
        """The pages `slot_ids` touch go to the back of the queue."""
        ps = self.page_size
        pages = slot_ids if ps == 1 else list(dict.fromkeys(s // ps for s in slot_ids))
        if not self.check:
            self.pool.used_pages -= len(pages)
            self.queue.extend(pages)
            return
        ids = list(pages)
        as_set = set(ids)
        if len(as_set) != len(ids) or not as_set <= self.in_use:  # set ops run in C
            bad = [s for s in ids if s not in self.in_use] or ids
            what = "slots" if ps == 1 else "pages"
            raise ValueError(f"free of {what} not in use (or freed twice): {bad[:8]}")
        self.in_use -= as_set
        self.pool.used_pages -= len(ids)
        self.queue += ids

    def check_invariants(self) -> None:
        used = self.pool.used_pages
        num_free = len(self.queue) - self.head + self.num_pages + 1 - self.next_fresh
        assert num_free + used == self.num_pages, "free + used != pool size"
        if self.check:
            assert len(self.in_use) == used, "in-use set disagrees with the count"
            assert not self.in_use.intersection(self.queue[self.head :]), "slot free and used"


SHARED_IDS: list[int] = []  # 0, 1, 2, ...: see shared_ids


def shared_ids(lo: int, hi: int) -> list[int]:
    """The ints lo .. hi - 1 (a new list), each one object shared by every pool that hands out
    lists of ids: a run of ids then compares equal to this slice pointer by pointer
    (SWASlotAllocator reads and writes its mapping a run at a time). Grows to the largest id
    asked for.

    >>> shared_ids(3, 6), shared_ids(700, 701)[0] is shared_ids(700, 701)[0]
    ([3, 4, 5], True)
    """
    have = len(SHARED_IDS)
    if hi > have:
        SHARED_IDS.extend(range(have, max(hi, have + have // 4 + 1024)))
    return SHARED_IDS[lo:hi]


class FreshRuns:
    """Runs of fresh ids, never reused: each `take` starts a run GAP ids (page aligned) after
    the last, and a row at its run's end grows in place. With check on, the pages in use are
    sorted intervals [lo, hi), so a double free or a stray id raises."""

    def __init__(self, pool: SlotAllocator) -> None:
        self.pool = pool  # the page accounting: used_pages, deferred_pages
        self.page_size, self.check, self.num_pages = pool.page_size, pool.check, pool.num_pages
        self.next_fresh = 1  # the next run's first page
        # each run's first id and the next id to hand out (its row's end), ascending
        self.starts: list[int] = []
        self.cursor: list[int] = []
        self.lo: list[int] = []  # check: the pages in use, as intervals [lo, hi)
        self.hi: list[int] = []

    def take(self, num_tokens: int, num_pages: int) -> TokenRuns:
        """`num_pages` pages (counted by the pool already) as one run of `num_tokens` ids."""
        if not num_tokens:
            return TokenRuns()
        ps = self.page_size
        page = self.next_fresh
        self.next_fresh += -(-(num_tokens + SlotAllocator.GAP) // ps)  # the next run: aligned
        self.starts.append(page * ps)
        self.cursor.append(page * ps + num_tokens)
        self._hold(page, num_pages)
        return TokenRuns([(page * ps, num_tokens)])

    def extend(self, last_slot: int | None, num_tokens: int) -> TokenRuns | None:
        """In place when the row's run has room, else a fresh run."""
        first = None if last_slot is None else self.next_after(last_slot, num_tokens)
        return self.pool.alloc(num_tokens) if first is None else TokenRuns([(first, num_tokens)])

    def can_continue(self, last_slot: int, num_tokens: int) -> bool:
        """Whether a row ending at `last_slot` is its run's end, with room for `num_tokens`
        more in place (free pages aside)."""
        i = bisect_right(self.starts, last_slot) - 1
        return (i >= 0 and self.cursor[i] == last_slot + 1
                and last_slot + num_tokens < self.starts[i] + SlotAllocator.GAP)

    def next_after(self, last_slot: int, num_tokens: int = 1) -> int | None:
        """The first of `num_tokens` ids continuing a row whose last id is `last_slot` in place
        (they are last_slot + 1 ...), taken; None when it cannot continue in place or pages are
        short."""
        i = bisect_right(self.starts, last_slot) - 1
        if (i < 0 or self.cursor[i] != last_slot + 1
                or last_slot + num_tokens >= self.starts[i] + SlotAllocator.GAP):
            return None
        pool, ps = self.pool, self.page_size
        first_new = -(-(last_slot + 1) // ps)  # pages below it are in use already
        pages = -(-(last_slot + 1 + num_tokens) // ps) - first_new
        if pages > self.num_pages - pool.used_pages - pool.deferred_pages:
            return None
        self.cursor[i] += num_tokens
        pool.used_pages += pages
        if self.check and pages:  # _hold, inlined (a decode step's call): mostly one interval grows
            j = bisect_right(self.lo, first_new) - 1
            if j >= 0 and self.hi[j] == first_new:
                self.hi[j] = first_new + pages
            else:
                self._hold(first_new, pages)
        return last_slot + 1

    def _hold(self, page: int, n: int) -> None:
        """Check mode: pages page..page+n-1 join the intervals in use."""
        if self.check and n:
            i = bisect_right(self.lo, page) - 1
            if i >= 0 and self.hi[i] == page:
                self.hi[i] = page + n  # continues an interval in use
            else:
                self.lo.insert(i + 1, page)
                self.hi.insert(i + 1, page + n)

    def free(self, slot_ids: Sequence[int]) -> None:
        """Every page the runs (a TokenRuns or plain ints) touch, once."""
        runs = slot_ids if isinstance(slot_ids, TokenRuns) else TokenRuns.from_ids(slot_ids)
        ps = self.page_size
        pages = TokenRuns.concat([TokenRuns([(a // ps, (a + n - 1) // ps - a // ps + 1)])
                                  for a, n in runs.runs()]) if ps > 1 else runs
        merged: list[list[int]] = []
        for a, n in sorted(pages.runs()):  # a page touched by two runs is released once
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], a + n)
            else:
                merged.append([a, a + n])
        if self.check:
            for a, b in merged:
                self._release(a, b)
        self.pool.used_pages -= sum(b - a for a, b in merged)

    def _release(self, a: int, b: int) -> None:
        """Check mode: pages a..b-1 leave the interval that holds them."""
        i = bisect_right(self.lo, a) - 1
        if i < 0 or self.hi[i] < b:
            what = "slots" if self.page_size == 1 else "pages"
            raise ValueError(f"free of {what} not in use (or freed twice): {a}..{b - 1}")
        lo, hi = self.lo[i], self.hi[i]
        if lo == a and hi == b:
            del self.lo[i], self.hi[i]
        elif lo == a:
            self.lo[i] = b
        elif hi == b:
            self.hi[i] = a
        else:  # a hole in the middle: split the interval
            self.hi[i] = a
            self.lo.insert(i + 1, b)
            self.hi.insert(i + 1, hi)

    def check_invariants(self) -> None:
        if self.check:
            held = sum(h - lo for lo, h in zip(self.lo, self.hi))
            assert held == self.pool.used_pages, "in-use intervals disagree with the count"
            assert all(h <= lo for h, lo in zip(self.hi, self.lo[1:])), "intervals overlap"


def RunAllocator(size: int, check: bool = True, page_size: int = 1) -> SlotAllocator:  # noqa: N802
    """The runs representation under its earlier name: SlotAllocator(..., runs=True).

    >>> RunAllocator(12, page_size=4).alloc(3)  # a page of 4 taken, 3 ids handed out
    TokenRuns([(4, 3)])
    """
    return SlotAllocator(size, check, page_size, runs=True)
