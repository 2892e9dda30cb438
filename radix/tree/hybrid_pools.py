"""The pools a hybrid model's tree frees into: SGLang 0.5.23's SWATokenToKVPoolAllocator (a full
pool and a sliding-window pool allocated in step, with the full -> SWA slot mapping) and
MambaSlotAllocator (one state slot per request or cached checkpoint), over integer slot ids.

The full and SWA pools are our `SlotAllocator`s (radix/request.py); a token's SWA slot is
`mapping[full_slot]`, cleared when its SWA slot is freed (out of the window, or tombstoned in the
tree) while the full slot lives on. Leaves out: the per-request SWA ring, the unified
(virtual/physical) pools, the int8 checkpoint pool, free groups (frees apply at once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from operator import itemgetter

from radix.request import SHARED_IDS, SlotAllocator


class SWASlotAllocator:
    """Full and SWA slots, allocated together, one mapping between them (page 1 or paged).

    >>> a = SWASlotAllocator(8, 4); ids = a.alloc(3); ids, a.translate(ids)
    ([1, 2, 3], [1, 2, 3])
    >>> a.free_swa([1, 2]); a.translate(ids), a.swa_available_size(), a.full_available_size()
    ([0, 0, 3], 3, 5)
    """

    def __init__(self, size: int, size_swa: int, page_size: int = 1, check: bool = True) -> None:
        self.page_size, self.check = page_size, check
        self.full = SlotAllocator(size, check=check, page_size=page_size)
        self.swa = SlotAllocator(size_swa, check=check, page_size=page_size)
        # full slot -> its SWA slot (0: none), as SGLang's full_to_swa_index_mapping
        self.mapping: list[int] = [0] * ((size // page_size + 2) * page_size)
        # each pool's free tokens: full_available_size() and swa_available_size(), bound to
        # the pools' own methods (one call each where a wrapper would be two)
        self.full_available_size = self.full.available_size
        self.swa_available_size = self.swa.available_size

    @property
    def size(self) -> int:
        return min(self.full.size, self.swa.size)

    def available_size(self) -> int:
        return min(self.full.available_size(), self.swa.available_size())

    def alloc(self, num_tokens: int) -> list[int] | None:
        return self.alloc_extend(None, num_tokens)

    def alloc_extend(self, last_slot: int | None, num_tokens: int) -> list[int] | None:
        """Slots continuing a row whose last full slot is `last_slot` in both pools (the SWA
        side continues from that slot's SWA peer); None (nothing taken) when either is short."""
        ps = self.page_size
        room = 0 if last_slot is None else (ps - 1 - last_slot % ps)
        need_pages = -(-max(num_tokens - room, 0) // ps)
        full_free, swa_free = self.full_available_size(), self.swa_available_size()
        if need_pages * ps > (full_free if full_free < swa_free else swa_free):
            return None
        if ps == 1 or last_slot is None:  # nothing to continue: fresh pages on both sides
            if num_tokens < 0:
                raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
            full_pool, swa_pool = self.full, self.swa  # (each pool's alloc, checked above)
            full_pool.used_pages += need_pages
            swa_pool.used_pages += need_pages
            full = full_pool._ids.take(num_tokens, need_pages)
            swa = swa_pool._ids.take(num_tokens, need_pages)
        else:
            full = self.full.alloc_extend(last_slot, num_tokens)
            swa = self.swa.alloc_extend(self.mapping[last_slot] or None, num_tokens)
        self._scatter(full, swa)
        return full

    def translate(self, full_ids: Sequence[int]) -> list[int]:
        """The SWA slot of each full slot (0 where its SWA was freed)."""
        n = len(full_ids)
        if n >= RUN_MIN and full_ids.__class__ is list:
            lo = full_ids[0]
            if full_ids[-1] - lo == n - 1 and full_ids == SHARED_IDS[lo: lo + n]:
                return self.mapping[lo: lo + n]  # a run: one slice
        if n > 1:  # one C call (itemgetter) instead of a loop
            return list(itemgetter(*full_ids)(self.mapping))
        m = self.mapping
        return [m[f] for f in full_ids]

    # The mapping is read and written a run of consecutive ids at a time (one slice) where the
    # ids come in runs, as a fresh pool's and a node's do; any other ids go one by one. A run
    # is checked whole against SHARED_IDS (the pools' ids are those very objects: one pointer
    # compare per id).

    def _run_end(self, ids: list[int], i: int, n: int) -> int:
        """The end j of the longest run ids[i:j] = ids[i], ids[i] + 1, ... when it holds at
        least RUN_MIN ids, else i. The end is searched by the ids' values (binary search for
        the last position that looks in the run), then the run is checked whole."""
        lo = ids[i]
        if ids[n - 1] - lo == n - 1 - i:
            j = n
        else:
            a, b = i, n - 1  # ids[a] looks in the run, ids[b] does not
            while b - a > 1:
                mid = (a + b) >> 1
                if ids[mid] - lo == mid - i:
                    a = mid
                else:
                    b = mid
            j = a + 1
        if j - i >= RUN_MIN and (ids if j - i == n else ids[i:j]) == SHARED_IDS[lo: lo + j - i]:
            return j
        return i

    def _scatter(self, keys: Sequence[int], values: Sequence[int]) -> None:
        """mapping[keys[k]] = values[k] for every k."""
        m, n, i = self.mapping, len(keys), 0
        if n >= RUN_MIN and keys.__class__ is list:
            while i < n:
                j = self._run_end(keys, i, n)
                if j == i:
                    break
                lo = keys[i]
                m[lo: lo + j - i] = values if j - i == n else values[i:j]
                i = j
        if i < n:
            for f, w in zip(keys[i:], values[i:]) if i else zip(keys, values):
                m[f] = w

    def free(self, full_ids: Sequence[int]) -> None:
        """Both sides (SGLang's free_segment): the SWA peers first, through the mapping."""
        self.free_swa(full_ids)
        self.full.free(full_ids)

    def free_full(self, full_ids: Sequence[int]) -> None:
        """The full side only (its SWA peers are gone already, or freed after by free_swa)."""
        if len(full_ids):
            self.full.free(full_ids)

    def free_swa(self, full_ids: Sequence[int]) -> None:
        """The SWA pages of a page-aligned run of full slots (free_swa_segment): each full
        page's first slot names its SWA page; the whole page's mapping is cleared. A slot
        whose SWA is already free raises with check on (SGLang's invariant check, which is off
        by default there, as check=False is here)."""
        if not len(full_ids):
            return
        ps, m = self.page_size, self.mapping
        if ps == 1:
            n, lo = len(full_ids), full_ids[0]
            if n >= RUN_MIN and full_ids.__class__ is list and full_ids[-1] - lo == n - 1 \
                    and full_ids == SHARED_IDS[lo: lo + n]:  # a run: one slice each
                swa_ids = m[lo: lo + n]
                m[lo: lo + n] = [0] * n
            else:
                swa_ids = self.translate(full_ids)
                for f in full_ids:
                    m[f] = 0
        else:
            swa_ids = []
            for rep in full_ids[::ps]:
                swa_ids.append(m[rep])
                base = rep - rep % ps
                m[base: base + ps] = [0] * ps
        if self.check and not all(swa_ids):  # (0 in swa_ids, by truth: no compare per id)
            raise ValueError(f"a full slot of {list(full_ids)[:8]}... has no SWA peer to free "
                             "(freed twice?)")
        self.swa.free(swa_ids)

    def move_swa(self, kept: Sequence[int], incoming: Sequence[int]) -> list[int]:
        """A locked tombstone recovered from a request's slots: the kept full slots take the
        incoming slots' SWA peers (RecoverSWAWithLockedFull's mapping move); returns them."""
        swa, m = self.translate(incoming), self.mapping
        for f in incoming:
            m[f] = 0
        for f, w in zip(kept, swa):
            m[f] = w
        return swa

    def check_invariants(self) -> None:
        self.full.check_invariants()
        self.swa.check_invariants()
        peers = [w for w in self.mapping if w]
        assert len(set(peers)) == len(peers), "two full slots map to one SWA slot"


RUN_MIN = 16  # fewer ids than this go one by one


class MambaSlotPool:
    """Mamba state slots 1..size (slot 0 is the padding slot): taken from the front of the
    free list, freed to its back (SGLang's MambaSlotAllocator, deterministic the same way).

    >>> p = MambaSlotPool(3); p.alloc(2), p.available_size()
    ([1, 2], 1)
    >>> p.free([1]); p.alloc(2)
    [3, 1]
    """

    def __init__(self, size: int) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an int >= 1 (max_mamba_cache_size), got {size!r}")
        self.size = size
        self.free_slots: deque[int] = deque(range(1, size + 1))
        self.in_use: set[int] = set()

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, n: int) -> list[int] | None:
        free = self.free_slots
        if n > len(free):
            return None
        out = [free.popleft() for _ in range(n)]
        self.in_use.update(out)
        return out

    def free(self, slots: Sequence[int]) -> None:
        in_use = self.in_use
        for s in slots:
            if s not in in_use:
                raise ValueError(f"mamba slot {s} is not in use (freed twice?)")
            in_use.discard(s)
        self.free_slots.extend(slots)

    def check_invariants(self) -> None:
        assert len(self.in_use) + len(self.free_slots) == self.size, "mamba slots leaked"
