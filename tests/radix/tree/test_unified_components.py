"""The unified tree's component rules, one known answer each (SGLang 0.5.23's
unified_cache/components/README.md; tools/diff_sglang_hybrid.py checks them on random lifecycles
against SGLang's own code)."""

from __future__ import annotations

import pytest

from radix import events as ev
from radix.request import Req
from radix.tree.components.base import FULL, MAMBA, SWA
from radix.tree.hybrid_lifecycle import match_kv_cache
from radix.tree.hybrid_pools import MambaSlotPool
from radix.tree.invariants import InvariantError
from radix.tree.key import RadixKey
from radix.tree.unified_radix_cache import InsertParams, UnifiedRadixCache


def put(cache, ids, state=None):
    return cache.insert(InsertParams(RadixKey(list(ids)), mamba_value=state))


def test_swa_tombstone_cascades_to_mamba_but_not_the_reverse():
    """FULL + SWA + MAMBA, window 16 (no leaf is capped): [0, 8) with a state, then [0, 12)
    with one: the inner node [0, 8) keeps SWA and a state. The second insert refreshed the
    leaf, then its window's ancestors behind it, so SWA's LRU tail is the inner node:
    tombstoning its SWA takes its state too (SWA 1 > MAMBA 0); FULL stays.
    An insert whose own SWA is gone below 8 (swa_evicted_seqlen) gives the inner node a
    state again but no SWA (no recovery outside the insert's window). MAMBA's LRU tail is
    then the leaf's state, older: the leaf goes whole (4 FULL, 4 SWA, 1 state); the inner
    node's state stays (MAMBA 0 cascades to nothing)."""
    sink = ev.ListSink()
    c = UnifiedRadixCache(("full", "swa", "mamba"), sliding_window_size=16, sink=sink)
    put(c, range(8), [1])
    put(c, range(12), [2])
    inner = c.node(1)
    assert (len(inner.key), inner.component_data[MAMBA].value) == (8, [1])
    r = c.evict(swa_num_tokens=1)
    assert (r.swa_num_tokens_evicted, r.mamba_num_evicted, r.num_tokens_evicted) == (8, 1, 0)
    assert inner.value is not None and inner.component_data[SWA].value is None
    causes = [(e.component, e.cause) for e in sink.events if isinstance(e, ev.ComponentTombstoned)]
    assert causes == [("swa", "evict"), ("mamba", "cascade")]
    c.insert(InsertParams(RadixKey(list(range(8))), mamba_value=[3], swa_evicted_seqlen=8))
    assert inner.component_data[SWA].value is None and inner.component_data[MAMBA].value == [3]
    r = c.evict(mamba_num=1)
    assert (r.mamba_num_evicted, r.num_tokens_evicted, r.swa_num_tokens_evicted) == (1, 4, 4)
    assert c.total_size() == 8 and inner.component_data[MAMBA].value == [3]
    c.check_invariants()


def test_swa_lock_covers_the_last_window_and_releases_early():
    """Window 4, a path of three 3-token nodes (9 tokens). Locking the deepest: FULL locks all
    three (9 tokens protected), SWA the last window only: the deepest two (3 + 3 >= 4),
    stamping the upper of them as the boundary. dec_swa_lock_only drops SWA's part;
    FULL stays protected until the final release (skip_swa=True)."""
    c = UnifiedRadixCache(("full", "swa"), sliding_window_size=4)
    for n in (3, 6, 9):
        put(c, range(n))  # a leaf of 3 each time: no window cap (3 <= 4)
    leaf = c.match_prefix(list(range(9))).last_node
    receipt = c.inc_lock_ref(leaf)
    assert (c.protected_size_[FULL], c.protected_size_[SWA]) == (9, 6)
    assert receipt.swa_uuid == leaf.parent.component_data[SWA].uuid is not None
    c.dec_swa_lock_only(leaf, receipt)
    assert (c.protected_size_[FULL], c.protected_size_[SWA]) == (9, 0)
    c.dec_lock_ref(leaf, receipt, skip_swa=True)
    assert (c.protected_size_[FULL], c.evictable_size_[SWA]) == (0, 9)
    c.check_invariants()


def test_split_moves_the_window_boundary_to_the_upper_half():
    """The boundary uuid marks a node's older edge: a split hands it to the new upper node,
    so the release still stops where the lock did."""
    c = UnifiedRadixCache(("full", "swa"), sliding_window_size=4)
    leaf = put(c, range(4)).last_node
    receipt = c.inc_lock_ref(leaf)
    upper = c.match_prefix([0, 1, 9]).last_node  # splits the locked leaf 2 + 2
    assert upper.component_data[SWA].uuid == receipt.swa_uuid
    assert leaf.component_data[SWA].uuid is None and upper.component_data[SWA].lock_ref == 1
    c.dec_lock_ref(leaf, receipt)
    assert c.protected_size_[SWA] == 0
    c.check_invariants()


def test_mamba_path_cap_drops_the_shallowest_states():
    """mamba_max_states_per_path 2: states at depths 2, 4, 6, 8 along one path; after each
    insert only two remain, the deepest (the tail is kept)."""
    c = UnifiedRadixCache(("full", "mamba"), mamba_max_states_per_path=2)
    for i, n in enumerate((2, 4, 6, 8)):
        put(c, range(n), [i + 1])
    states = [n.component_data[MAMBA].value for n in (c.node(i) for i in (1, 2, 3, 4))]
    assert states == [None, None, [3], [4]]
    assert c.evictable_size_[MAMBA] == 2 and c.total_size() == 8


def test_match_copies_the_state_and_evicts_one_when_no_slot_is_free():
    """A match ending on a state gives the request its own slot (copy on write). With no free
    slot, a cached state is evicted while the hit is pinned: the other branch's goes."""
    pool = MambaSlotPool(2)
    c = UnifiedRadixCache(("full", "mamba"), mamba_pool=pool)
    a, b = pool.alloc(1), pool.alloc(1)
    put(c, [1, 2, 3], a)
    put(c, [5, 6], b)
    req = Req("r", [1, 2, 3, 4])
    r = match_kv_cache(c, req)
    state = c.kv_of(req)
    assert (r.prefix_len, state.mamba_cow_src_index, state.mamba_pool_idx) == (3, a[0], b[0])
    assert c.match_prefix([5, 6, 7]).prefix_len == 0  # [5, 6] went whole, with its state


def test_check_invariants_catches_an_unlisted_component_value():
    c = UnifiedRadixCache(("full", "swa"), sliding_window_size=2)
    leaf = put(c, range(3)).last_node
    cd = leaf.component_data[SWA]
    c.components[SWA].lru.remove(cd)
    with pytest.raises(InvariantError, match="LRU membership"):
        c.check_invariants()
