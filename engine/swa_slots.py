"""Full and SWA slot ids taken in step, with the full -> SWA mapping: the engine's allocator for a
sliding-window hybrid's two pools (engine/swa_pool.py holds the rows behind the ids).

Follows SGLang 0.5.23's SWATokenToKVPoolAllocator (mem_cache/allocator/swa.py) at page 1: the
tree and the request's row hold full slot ids; `free_swa` gives back a token's SWA slot alone (the
window passed it, or a component tree tombstoned it). Pure Python, like radix's SlotAllocator,
so the cache models can drive it. Leaves out: pages, free groups, the per-request ring.
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.request import SlotAllocator


class SWASlots:
    """Full slots 1..size and SWA slots 1..size_swa, taken in step, with the mapping between
    them; the same calls as SGLang's SWATokenToKVPoolAllocator at page 1 (alloc, free,
    free_swa, free_full, translate, full/swa_available_size).

    >>> a = SWASlots(6, 4); ids = a.alloc(3); a.free_swa(ids[:2]); a.translate(ids)
    [0, 0, 3]
    >>> a.swa_available_size(), a.full_available_size(), a.available_size()
    (3, 3, 3)
    >>> a.free(ids); a.swa_available_size(), a.full_available_size()  # 3's SWA peer goes too
    (4, 6)
    """

    def __init__(self, size: int, size_swa: int) -> None:
        self.full, self.swa = SlotAllocator(size), SlotAllocator(size_swa)
        self.mapping: dict[int, int] = {}  # full slot -> its SWA slot, while both live
        self.num_swa_freed = 0  # SWA slots given back by free_swa (window or tombstone)

    @property
    def size(self) -> int:
        return min(self.full.size, self.swa.size)

    def full_available_size(self) -> int:
        return self.full.available_size()

    def swa_available_size(self) -> int:
        return self.swa.available_size()

    def available_size(self) -> int:
        """Tokens that can be allocated: both pools must have them."""
        return min(self.full.available_size(), self.swa.available_size())

    @property
    def num_used(self) -> int:
        return self.full.num_used

    def alloc(self, num_tokens: int) -> list[int] | None:
        """`num_tokens` full slots, each with an SWA peer; None (nothing taken) when either pool
        is short."""
        if num_tokens > self.available_size():
            return None
        full = self.full.alloc(num_tokens)
        self.mapping.update(zip(full, self.swa.alloc(num_tokens)))
        return full

    def translate(self, full_ids: Sequence[int]) -> list[int]:
        """The SWA slot of each full slot; 0 (the padding row) where its SWA slot was freed."""
        get = self.mapping.get
        return [get(f, 0) for f in full_ids]

    def free(self, full_ids: Sequence[int]) -> None:
        """Both sides; a slot whose SWA peer is gone already frees its full side only.
        subtle: SGLang's free asserts every peer is live (its callers split the row first);
        a FULL-only tree (radix's RadixCache) cannot, so this one is lenient."""
        pop = self.mapping.pop
        peers = [s for s in (pop(f, 0) for f in full_ids) if s]
        self.swa.free(peers)
        self.full.free(full_ids)

    def free_swa(self, full_ids: Sequence[int]) -> None:
        """The SWA peers of `full_ids` (each must have one: freeing one twice raises)."""
        peers = []
        for f in full_ids:
            peer = self.mapping.pop(f, 0)
            if not peer:
                raise ValueError(f"full slot {f} has no SWA peer to free (freed twice?)")
            peers.append(peer)
        self.swa.free(peers)
        self.num_swa_freed += len(peers)

    def free_full(self, full_ids: Sequence[int]) -> None:
        """The full side of slots whose SWA peers are gone."""
        if any(f in self.mapping for f in full_ids):
            raise ValueError("free_full of a slot whose SWA peer is live: use free")
        self.full.free(full_ids)

    def check_invariants(self) -> None:
        self.full.check_invariants()
        self.swa.check_invariants()
        assert len(set(self.mapping.values())) == len(self.mapping), "two full slots, one SWA"
        assert len(self.mapping) == self.swa.num_used, "SWA slots in use without a full slot"
