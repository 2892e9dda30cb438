"""The component tree's replay law: a ComponentEventLog fed a UnifiedRadixCache's events holds the
cache's snapshot after every step (FULL, SWA and Mamba values, tombstones, every lock), and its
keyframes give the same tree at any step as the live model did then."""

from __future__ import annotations

import random

import pytest

from radix import events as ev
from radix.request import Req
from radix.tree.hybrid_args import HybridServerArgs, HybridShape, build_hybrid_cache
from radix.tree.hybrid_lifecycle import SchedulerKnobs, serve
from radix.tree.hybrid_pools import SWASlotAllocator
from radix.tree.unified_radix_cache import UnifiedRadixCache
from radix.tree.unified_replay import ComponentEventLog


class Checked(ComponentEventLog):
    """Compares the replay with the cache after each closed step, and keeps each snapshot."""

    def __init__(self, components, page_size: int) -> None:
        super().__init__(components, keyframe_every=5, page_size=page_size)
        self.cache = None
        self.seen: list[tuple] = []
        self.kinds: set[str] = set()

    def _close_step(self) -> None:
        self.kinds.update(type(e).__name__ + getattr(e, "cause", "") for e in self._open)
        super()._close_step()
        want = self.cache.snapshot()
        assert self.model.snapshot() == want, f"step {self.num_steps - 1} differs"
        self.seen.append(want)


@pytest.mark.parametrize("window, mamba, page", [(6, True, 1), (6, False, 2), (None, True, 1)])
def test_replay_equals_the_cache_after_every_step(window, mamba, page):
    """Small pools (60 full slots, 45 SWA, 8 states): evictions, tombstones, cascades, SWA
    recoveries and Mamba copies on write all happen in 40 requests over 3 shared prefixes."""
    shape = HybridShape(sliding_window=window, has_mamba=mamba, mamba_chunk_size=4)
    args = HybridServerArgs(page_size=page, max_total_num_tokens=60, swa_full_tokens_ratio=0.5,
                            max_mamba_cache_size=8 if mamba else None, mamba_track_interval=4,
                            swa_eviction_interval=1, mamba_max_states_per_path=2)
    comps = [c for c, on in (("swa", window), ("mamba", mamba)) if on]
    log = Checked(comps, page)
    cache, knobs = build_hybrid_cache(shape, args, sink=log)
    log.cache = cache
    rng = random.Random(window or 0)
    prefixes = [[rng.randrange(1, 50) for _ in range(12)] for _ in range(3)]
    for i in range(40):
        prompt = rng.choice(prefixes)[:rng.randrange(4, 13)] + [100 + i] * rng.randrange(1, 9)
        serve(cache, Req(f"r{i}", prompt, max_new_tokens=rng.randrange(1, 7)), knobs,
              chunked_prefill_size=rng.choice([None, 5]))
    want = {"NodeEvicted", "NodeSplit"} | ({"ComponentTombstonedevict"} if window else set())
    want |= {"ComponentTombstonedcascade"} if window and mamba else set()
    assert want <= log.kinds, want - log.kinds
    for step in range(0, log.num_steps + 1, 7):  # from keyframes: the tree as it was then
        assert log.snapshot_at(step) == (log.seen[step - 1] if step else log.snapshot_at(0))


def test_a_recovered_window_keeps_the_requests_full_slots():
    """test_hybrid_known_answers' recovery at w = 4: A caches P (32 tokens), SWA's LRU tail
    [0, 28) is tombstoned, C = P[:16] + 4 recovers [11, 16) from its own slots: the node's FULL
    slots become C's (ComponentStored.full_slot_ids), and the replay's follow."""
    w, n = 4, 32
    log = ComponentEventLog(("swa",))
    cache = UnifiedRadixCache(("full", "swa"), sliding_window_size=w, sink=log,
                              allocator=SWASlotAllocator(4 * n, 4 * n))
    p = list(range(n))
    serve(cache, Req("A", p, max_new_tokens=1), SchedulerKnobs())
    cache.evict(swa_num_tokens=1)
    serve(cache, Req("C", p[:16] + [100, 101, 102, 103], max_new_tokens=2), SchedulerKnobs())
    stored = [e for s in log.steps for e in s if isinstance(e, ev.ComponentStored)]
    recovered = [e for e in stored if e.recovered]
    assert [len(e.full_slot_ids) for e in recovered] == [5]
    assert log.model.snapshot() == cache.snapshot()
