"""A KV slot allocator without KV: hands out integer slot ids (SGLang's token_to_kv_pool_allocator).

The caches and the simulator use this one; `engine/kv_pool.py` implements the same three calls
over real tensors. Deterministic: frees go to the back, allocation takes from the front.
Leaves out: paged allocation (page_size > 1 uses the same per-token ids here).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol


class Allocator(Protocol):
    def alloc(self, num_tokens: int) -> list[int] | None: ...
    def free(self, slot_ids: Sequence[int]) -> None: ...
    def available_size(self) -> int: ...


class SlotAllocator:
    """Slots 1..size (SGLang reserves slot 0 for padding); never-used slots go out first, in
    order, then freed ones in the order they were freed. Memory is O(slots handed out).

    >>> a = SlotAllocator(4); a.alloc(3)
    [1, 2, 3]
    >>> a.free([2]); a.available_size()
    2
    >>> a.alloc(2)
    [4, 2]
    """

    def __init__(self, size: int) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        self.size = size
        self._next_fresh = 1  # slots >= this were never handed out
        self._free: deque[int] = deque()
        self._in_use: set[int] = set()

    def available_size(self) -> int:
        return self.size - len(self._in_use)

    def alloc(self, num_tokens: int) -> list[int] | None:
        """Takes `num_tokens` slots, or returns None (nothing taken) when too few are free."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        if num_tokens > self.available_size():
            return None
        fresh = min(num_tokens, self.size + 1 - self._next_fresh)
        out = list(range(self._next_fresh, self._next_fresh + fresh))
        self._next_fresh += fresh
        out.extend(self._free.popleft() for _ in range(num_tokens - fresh))
        self._in_use.update(out)
        return out

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots; freeing a slot that is not in use raises ValueError (a double free)."""
        ids = list(slot_ids)
        bad = [s for s in ids if s not in self._in_use]
        if bad or len(set(ids)) != len(ids):
            raise ValueError(f"free of slots not in use: {(bad or ids)[:8]}")
        self._in_use.difference_update(ids)
        self._free.extend(ids)

    @property
    def num_used(self) -> int:
        return len(self._in_use)

    def check_invariants(self) -> None:
        num_free = len(self._free) + self.size + 1 - self._next_fresh
        assert num_free + len(self._in_use) == self.size, "free + used != pool size"
        assert not self._in_use.intersection(self._free), "a slot is both free and in use"
