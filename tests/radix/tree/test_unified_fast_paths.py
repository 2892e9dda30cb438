"""The component tree's fast paths give the answers of the plain ones: the SWA pools' mapping
read and written a run of slot ids at a time, pools that share one int object per slot id, a
long first edge compared in place, evicted nodes freed without the cycle collector, and an SWA
leaf made capped (two nodes at once) as the insert, split and publishes would leave it."""

from __future__ import annotations

import gc
import random

import pytest

from radix.events import ListSink
from radix.request import Req, SlotAllocator, shared_ids
from radix.tree.components.base import SWA
from radix.tree.hybrid_lifecycle import SchedulerKnobs, serve
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator
from radix.tree.key import RadixKey
from radix.tree.unified_radix_cache import UnifiedRadixCache


def test_pools_hand_out_one_shared_object_per_slot_id():
    """Two pools, the same id: the same int object (a run of ids compares pointer by
    pointer), and the ids shared_ids names."""
    a, b = SlotAllocator(600), SlotAllocator(600, page_size=4)
    x, y = a.alloc(520), b.alloc(520)
    assert x[517] is y[514] is shared_ids(518, 519)[0] and x[517] == 518  # (page 0: padding)
    a.free(x[:300])
    again = a.alloc(300)  # the 80 never used, then the freed ones: the very same objects
    assert again[80] is x[0] and again[299] is x[219]


def mixed_ids(rng: random.Random, n: int) -> list[int]:
    """Distinct slot ids 1..399 in runs (shared objects), shuffled stretches and stray ids
    (fresh int objects of equal value: the run check compares values, not identity)."""
    out: list[int] = []
    free = set(range(1, 400))
    while len(out) < n and free:
        lo = rng.choice(sorted(free))
        stretch = [i for i in range(lo, lo + rng.choice([1, 5, 16, 17, 40])) if i in free]
        kind = rng.random()
        if kind < 0.4:
            stretch = [shared_ids(i, i + 1)[0] for i in stretch]
        elif kind < 0.7:
            rng.shuffle(stretch)
        else:
            stretch = [int(str(i)) for i in stretch]
        out += stretch[: n - len(out)]
        free -= set(stretch)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_swa_mapping_by_runs_matches_a_plain_model(seed):
    """Rows written through the mapping (alloc), read back (translate) and freed (free_swa),
    against a dict kept id by id: the same SWA slots, freed in the same order."""
    rng = random.Random(seed)
    pool = SWASlotAllocator(400, 400, check=True)
    freed: list[int] = []  # SWA slots as the pool gets them back
    free = pool.swa.free
    pool.swa.free = lambda ids: (freed.extend(ids), free(ids))[1]
    model: dict[int, int] = {}
    rows: list[list[int]] = []
    for _ in range(40):
        if rows and rng.random() < 0.45:
            row = rows.pop(rng.randrange(len(rows)))
            part = row if rng.random() < 0.5 else row[: max(1, len(row) // 2)]
            assert pool.translate(part) == [model.get(f, 0) for f in part]
            freed.clear()
            pool.free_swa(part)
            assert freed == [model.pop(f) for f in part]
            pool.free(row[len(part):])  # the rest, both sides
            pool.free_full(part)
            for f in row:
                model.pop(f, None)
        else:
            got = pool.alloc(rng.randrange(1, 60))
            if got is None:
                continue
            model.update(zip(got, pool.translate(got)))
            rows.append(got)
        probe = mixed_ids(rng, rng.randrange(1, 50))
        assert pool.translate(probe) == [model.get(f, 0) for f in probe]
        keys = mixed_ids(rng, rng.randrange(1, 60))
        pool._scatter(keys, list(range(900, 900 + len(keys))))
        want = [0] * len(pool.mapping)
        for f, w in zip(keys, range(900, 900 + len(keys))):
            want[f] = w
        assert [pool.mapping[f] for f in keys] == [want[f] for f in keys]
        for f in keys:  # put the rows' own peers back
            pool.mapping[f] = model.get(f, 0)
    for row in rows:
        pool.free(row)
    row = pool.alloc(20)
    pool.free_swa(row)
    with pytest.raises(ValueError, match="no SWA peer"):  # freed twice
        pool.free_swa(row)


@pytest.mark.parametrize("page", [1, 16])
def test_a_long_first_edge_matches_as_far_as_the_key_agrees(page):
    """A 160-token first edge (compared in place, not sliced) against keys that leave it at
    every 16th token, end on it, or run past it: the hit is the page-floored agreement."""
    edge = list(range(1000, 1160))
    c = UnifiedRadixCache(page_size=page)
    c.insert(RadixKey(edge))
    for cut in range(0, 161, 16):
        for key in (edge[:cut] + [7] * 40, edge[:cut], edge + [5] * cut):
            agree = next((i for i, (a, b) in enumerate(zip(key, edge)) if a != b),
                         min(len(key), len(edge)))
            assert c.match_prefix(list(key)).prefix_len == agree - agree % page
            c.check_invariants()


@pytest.mark.parametrize("components", [("full", "swa"), ("full", "mamba"),
                                        ("full", "swa", "mamba")])
def test_evicted_nodes_leave_no_reference_cycles(components):
    """Requests through a small component tree evict leaves all along; with the cycle
    collector off, nothing they leave behind needs it: every evicted node went by refcount."""
    swa = "swa" in components
    c = UnifiedRadixCache(components, sliding_window_size=8 if swa else None,
                          allocator=SWASlotAllocator(300, 300) if swa else SlotAllocator(300),
                          mamba_pool=MambaSlotPool(12) if "mamba" in components else None)
    rng = random.Random(1)
    prefixes = [[rng.randrange(9) for _ in range(40)] for _ in range(3)]
    gc.collect()
    gc.disable()
    try:
        for i in range(60):
            toks = rng.choice(prefixes) + [rng.randrange(9) for _ in range(rng.randrange(5, 60))]
            serve(c, Req(f"r{i}", toks, max_new_tokens=rng.randrange(1, 4)), SchedulerKnobs())
        assert c.total_size() < 300 and gc.collect() == 0
    finally:
        gc.enable()
    c.check_invariants()


@pytest.mark.parametrize(("components", "page"), [(("full", "swa"), 1), (("full", "swa"), 4),
                                                  (("full", "swa", "mamba"), 1)])
def test_a_capped_leaf_made_at_once_equals_the_insert_then_the_split(components, page):
    """The same requests through two trees, one making a new in-window leaf longer than the
    window as its two nodes at once (swa_cap.add_capped_leaf), one adding it whole and
    letting commit_insert split and publish it: the same events (ids, times, slots, in order)
    and the same tree, sizes and SWA LRU order after every request."""
    def run(at_once: bool):
        rng, sink = random.Random(7), ListSink()
        c = UnifiedRadixCache(components, page_size=page, sliding_window_size=12,
                              mamba_chunk_size=4, allocator=SWASlotAllocator(400, 400, page),
                              mamba_pool=MambaSlotPool(10) if "mamba" in components else None,
                              sink=sink)
        if not at_once:
            c._add_capped_leaf = None
        prefixes = [[rng.randrange(9) for _ in range(30)] for _ in range(3)]
        states = []
        for i in range(40):
            toks = rng.choice(prefixes) + [rng.randrange(9) for _ in range(rng.randrange(1, 50))]
            serve(c, Req(f"r{i}", toks, max_new_tokens=rng.choice([1, 1, 3])), SchedulerKnobs())
            nodes = [(x.id, x.last_access_time, x.creation_time, x.priority, x.hit_count)
                     for x in c._nodes.values()]
            lru = [cd.node.id for cd in c.components[SWA].lru.entries()]
            states.append((c.snapshot(), nodes, lru, dict(c.evictable_size_)))
        return sink.events, states

    made = []
    real = UnifiedRadixCache.__init__

    def counting(self, *a, **k):
        real(self, *a, **k)
        if self._add_capped_leaf is not None:
            inner = self._add_capped_leaf
            self._add_capped_leaf = lambda *args: made.append(inner(*args)) or made[-1]
    UnifiedRadixCache.__init__ = counting
    try:
        assert run(True) == run(False)
    finally:
        UnifiedRadixCache.__init__ = real
    assert sum(leaf is not None for leaf in made) >= 5  # the fast path ran
