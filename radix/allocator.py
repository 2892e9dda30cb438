"""A KV slot allocator without KV: hands out integer slot ids (SGLang's token_to_kv_pool_allocator).

The caches and the simulator use this one; `engine/kv_pool.py` implements the same calls over
real tensors. Deterministic: frees go to the back, allocation takes from the front. page_size > 1
follows SGLang's PagedTokenToKVPoolAllocator (whole pages; `alloc_extend` fills a row's last
page first). radix/tokens/slots.py hands out runs of ids for compact (Mooncake) requests.
Leaves out: SGLang's sorted free list (pages come back in the order they were freed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


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

    Paged (page 0 is the padding page): 3 tokens take one whole page of 4, and a row whose last
    slot is 6 continues in its page (7) before it takes a new one (12..).
    >>> p = SlotAllocator(12, page_size=4); p.alloc(3), p.available_size()
    ([4, 5, 6], 8)
    >>> p.alloc_extend(6, 3), p.available_size()
    ([7, 8, 9], 4)
    """

    def __init__(self, size: int, check: bool = True, page_size: int = 1) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size  # SGLang: size // page_size, pages 1..num_pages
        self.check = check
        self._next_fresh = 1  # pages >= this were never handed out
        self._free: list[int] = []  # freed pages; the live queue is _free[_head:]
        self._head = 0
        self._in_use: set[int] = set()  # pages, kept only when check is on
        self._num_used = 0  # pages in use

    def available_size(self) -> int:
        """Free tokens: free pages * page_size (a partly used page counts as used)."""
        return (self.num_pages - self._num_used) * self.page_size

    def alloc(self, num_tokens: int) -> list[int] | None:
        """Takes `num_tokens` slots (whole pages: the rest of the last page stays reserved to
        the caller, for `alloc_extend`), or returns None (nothing taken) when too few are free."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        ps = self.page_size
        pages = self._take(-(-num_tokens // ps))
        if pages is None or ps == 1:
            return pages
        return [p * ps + i for p in pages for i in range(ps)][:num_tokens]

    def alloc_extend(self, last_slot: int | None, num_tokens: int) -> list[int] | None:
        """`num_tokens` slots continuing a row whose last slot is `last_slot` (None: empty row):
        the free rest of that slot's page first, then new pages (SGLang's alloc_extend and
        alloc_decode); None (nothing taken) when too few pages are free."""
        ps = self.page_size
        if ps == 1 or last_slot is None or (last_slot + 1) % ps == 0:
            return self.alloc(num_tokens)
        if self.check and last_slot // ps not in self._in_use:
            raise ValueError(f"slot {last_slot} lies in a page that is not in use")
        fill = min(num_tokens, ps - (last_slot + 1) % ps)
        rest = self.alloc(num_tokens - fill)
        return None if rest is None else list(range(last_slot + 1, last_slot + 1 + fill)) + rest

    def _take(self, num_pages: int) -> list[int] | None:
        if num_pages > self.num_pages - self._num_used:
            return None
        fresh = min(num_pages, self.num_pages + 1 - self._next_fresh)
        out = list(range(self._next_fresh, self._next_fresh + fresh))
        self._next_fresh += fresh
        rest = num_pages - fresh
        if rest:
            out += self._free[self._head : self._head + rest]
            self._head += rest
            if self._head > 4096 and self._head * 2 > len(self._free):
                del self._free[: self._head]  # compact the consumed front
                self._head = 0
        self._num_used += num_pages
        if self.check:
            self._in_use.update(out)
        return out

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots (paged: every page they touch, once); with check on, freeing a slot
        that is not in use raises ValueError."""
        ps = self.page_size
        if ps == 1:
            pages = slot_ids
        else:
            pages = list(dict.fromkeys(s // ps for s in slot_ids))
        if not self.check:
            self._num_used -= len(pages)
            self._free.extend(pages)
            return
        ids = list(pages)
        as_set = set(ids)
        if len(as_set) != len(ids) or not as_set <= self._in_use:  # set ops run in C
            bad = [s for s in ids if s not in self._in_use] or ids
            what = "slots" if ps == 1 else "pages"
            raise ValueError(f"free of {what} not in use (or freed twice): {bad[:8]}")
        self._in_use -= as_set
        self._num_used -= len(ids)
        self._free += ids

    @property
    def num_used(self) -> int:
        """Tokens in use (whole pages)."""
        return self._num_used * self.page_size

    def check_invariants(self) -> None:
        num_free = len(self._free) - self._head + self.num_pages + 1 - self._next_fresh
        assert num_free + self._num_used == self.num_pages, "free + used != pool size"
        if self.check:
            assert len(self._in_use) == self._num_used, "in-use set disagrees with the count"
            assert not self._in_use.intersection(self._free[self._head :]), "slot free and used"
