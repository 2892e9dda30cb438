"""A KV slot allocator without KV: hands out integer slot ids (SGLang's token_to_kv_pool_allocator).

The caches and the simulator use this one; `engine/kv_pool.py` implements the same three calls
over real tensors. Deterministic: frees go to the back, allocation takes from the front.
Leaves out: paged allocation (page_size > 1 uses the same per-token ids here).
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
