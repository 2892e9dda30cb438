"""The SWA pool's allocator under radix's FULL-only RadixCache: radix's SWASlotAllocator (SGLang
0.5.23's SWATokenToKVPoolAllocator at page 1: full and SWA slots taken in step, the full -> SWA
mapping) with a lenient `free` and a count of the SWA slots given back alone.

SGLang's free asserts that every slot still has its SWA peer: its callers (and radix's
UnifiedRadixCache) free the part a request's window has passed on the full side only. The
FULL-only tree cannot tell the two apart, so here a slot whose SWA peer is gone frees its full side.
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.tree.hybrid_pools import SWASlotAllocator


class SWASlots(SWASlotAllocator):
    """SWASlotAllocator at page 1 whose `free` skips SWA peers already freed.

    >>> a = SWASlots(6, 4); ids = a.alloc(3); a.free_swa(ids[:2]); a.translate(ids)
    [0, 0, 3]
    >>> a.swa_available_size(), a.full_available_size(), a.available_size(), a.num_swa_freed
    (3, 3, 3, 2)
    >>> a.free(ids); a.swa_available_size(), a.full_available_size()  # 3's SWA peer goes too
    (4, 6)
    """

    def __init__(self, size: int, size_swa: int) -> None:
        super().__init__(size, size_swa)
        self.num_swa_freed = 0  # SWA slots given back alone (the window passed, a tombstone)

    @property
    def num_used(self) -> int:
        return self.full.num_used

    def free(self, full_ids: Sequence[int]) -> None:
        """Both sides; a slot whose SWA peer is gone already frees its full side only."""
        m = self.mapping
        live = [f for f in full_ids if m[f]]
        if live:
            super().free_swa(live)
        self.full.free(full_ids)

    def free_swa(self, full_ids: Sequence[int]) -> None:
        """The SWA peers of `full_ids` alone (each must have one: freeing one twice raises)."""
        super().free_swa(full_ids)
        self.num_swa_freed += len(full_ids)
