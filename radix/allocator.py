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
    """Slots 1..size (SGLang reserves slot 0 for padding).

    >>> a = SlotAllocator(4); a.alloc(3)
    [1, 2, 3]
    >>> a.free([2]); a.available_size()
    2
    """

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.size = size
        self._free: deque[int] = deque(range(1, size + 1))
        self._in_use: set[int] = set()

    def available_size(self) -> int:
        return len(self._free)

    def alloc(self, num_tokens: int) -> list[int] | None:
        """Takes `num_tokens` slots, or returns None (nothing taken) when too few are free."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        if num_tokens > len(self._free):
            return None
        out = [self._free.popleft() for _ in range(num_tokens)]
        self._in_use.update(out)
        return out

    def free(self, slot_ids: Sequence[int]) -> None:
        """Returns slots; freeing a slot that is not in use raises ValueError (a double free)."""
        bad = [s for s in slot_ids if s not in self._in_use]
        if bad:
            raise ValueError(f"free of slots not in use: {bad[:8]}")
        self._in_use.difference_update(slot_ids)
        self._free.extend(slot_ids)

    @property
    def num_used(self) -> int:
        return len(self._in_use)

    def check_invariants(self) -> None:
        assert len(self._free) + len(self._in_use) == self.size, "free + used != pool size"
        assert not self._in_use.intersection(self._free), "a slot is both free and in use"
