"""Router decisions against hand-computed cases from each anchor's documented rules."""

from __future__ import annotations

import pytest

from radix.cluster import (
    CacheAware,
    CacheAwareConfig,
    KeyIndex,
    KvOverlap,
    KvOverlapConfig,
    Load,
    PrefixAffinity,
    PrefixAffinityConfig,
    RouteRequest,
    SessionRouter,
    block_keys,
    make_router,
)
from radix.cluster.approx import ApproxTree
from radix.tokens import TokenRuns

IDLE3 = [Load(0, 0)] * 3


def req(rid, keys, num_tokens=None, session=None):
    return RouteRequest(rid, tuple(keys), num_tokens if num_tokens is not None
                        else 16 * len(keys), session)


def test_round_robin_random_seeded():
    rr = make_router("round-robin", 3)
    assert [rr.route(req("a", []), IDLE3).rank for _ in range(5)] == [0, 1, 2, 0, 1]
    a, b = make_router("random", 4, seed=7), make_router("random", 4, seed=7)
    picks = [a.route(req("x", []), [Load(0, 0)] * 4).rank for _ in range(50)]
    assert picks == [b.route(req("x", []), [Load(0, 0)] * 4).rank for _ in range(50)]
    assert set(picks) == {0, 1, 2, 3}


def test_least_load_tokens_then_lowest_id():
    """Tokens 300, 120, 120: replicas 1 and 2 tie at 120; the lower id, 1, wins (requests
    are not looked at: replica 1 has more of them)."""
    d = make_router("least-load", 3).route(req("a", []), [Load(1, 300), Load(9, 120), Load(1, 120)])
    assert (d.rank, d.reason, d.scores) == (1, "least-load", (300.0, 120.0, 120.0))


def test_power_of_two_takes_the_less_loaded_of_its_draw():
    """Whatever pair the seeded draw gives, the pick is the less loaded of the two named in
    the sentence; over many draws the most loaded replica (of 3) is never picked, since any
    pair holding it holds a less loaded one."""
    r = make_router("power-of-two", 3, seed=1)
    loads = [Load(0, 10), Load(0, 500), Load(0, 20)]
    ranks = {r.route(req("a", []), loads).rank for _ in range(60)}
    assert 1 not in ranks and ranks == {0, 2}


def test_session_consistent_hash():
    """Same session, same replica; a 4th replica moves only the sessions the new replica's
    ring points take over (every moved session goes to replica 3)."""
    three, four = SessionRouter(3), SessionRouter(4)
    sessions = [f"user-{i}" for i in range(300)]
    for s in sessions[:20]:
        assert three.route(req("t1", [], session=s), IDLE3).rank == \
            three.route(req("t2", [], session=s), IDLE3).rank
    moved = [s for s in sessions if three.owner(s) != four.owner(s)]
    assert all(four.owner(s) == 3 for s in moved)
    assert 0 < len(moved) < 150  # about a quarter of 300


def test_cache_aware_hit_miss_and_imbalance():
    """cache_threshold 0.3 (RouterArgs default). Request A (4 blocks of 16) on idle workers: no
    tree matches (ratio 0 <= 0.3): smallest tree, all empty, lowest id 0. Request B shares 3 of
    4 blocks with A: ratio 48 / 64 = 0.75 > 0.3: worker 0 (cache hit). Request C shares 1 of 4:
    16 / 64 = 0.25 <= 0.3: smallest tree: worker 0 holds 5 blocks, 1 and 2 none: worker 1.
    Loads 100, 30, 40 requests: 100 - 30 = 70 > 64 and 100 > 30 x 1.5: imbalanced: shortest
    queue, worker 1, even for a full match on worker 0; with 100, 40, 40: 60 <= 64: balanced."""
    r = CacheAware(3)
    a = r.route(req("A", [1, 2, 3, 4]), IDLE3)
    assert (a.rank, a.reason) == (0, "cache-miss")
    b = r.route(req("B", [1, 2, 3, 5]), IDLE3)
    assert (b.rank, b.reason, b.scores) == (0, "cache-hit", (0.75, 0.0, 0.0))
    c = r.route(req("C", [1, 6, 7, 8]), IDLE3)
    assert (c.rank, c.reason) == (1, "cache-miss") and r.tree.sizes == [5, 4, 0]
    d = r.route(req("D", [1, 2, 3, 4]), [Load(100, 0), Load(30, 0), Load(40, 0)])
    assert (d.rank, d.reason) == (1, "imbalance")
    e = r.route(req("E", [1, 2, 3, 4]), [Load(100, 0), Load(40, 0), Load(40, 0)])
    assert (e.rank, e.reason) == (0, "cache-hit")


def test_cache_aware_periodic_size_bounded_eviction():
    """max_tree_size 32 tokens = 2 blocks of 16, every 10 s. At t=5 worker 0 holds [1 2 3]
    (3 blocks): no eviction yet. At t=10 the next route trims it to 2 blocks, dropping its LRU
    leaf (block 3), so [1 2 3] matches 2 blocks: 32 / 48."""
    r = CacheAware(2, CacheAwareConfig(eviction_interval_secs=10, max_tree_size=32))
    r.route(req("A", [1, 2, 3]), [Load(0, 0)] * 2, now=5.0)
    assert r.tree.sizes == [3, 0]
    d = r.route(req("B", [1, 2, 3]), [Load(0, 0)] * 2, now=10.0)
    assert d.scores[0] == pytest.approx(32 / 48) and d.rank == 0


def test_approx_tree_evicts_lru_leaves_first():
    t = ApproxTree(1)
    t.insert((1, 2, 3), 0, now=1.0)
    t.insert((1, 4), 0, now=2.0)  # [1] refreshed at 2; leaves 3 (t=1) and 4 (t=2)
    assert t.evict(max_blocks=3) == 1 and t.match((1, 2, 3)).depths == (2,)
    assert t.evict(max_blocks=1) == 2 and t.match((1, 4)).depths == (1,)


def test_kv_overlap_cost():
    """Block 16, a 160-token prompt: 10 blocks. Worker 0 holds 6 of them, load 320 tokens (20
    blocks): cost 1 x 4 + 20 = 24. Worker 1 holds none, load 16 (1): 10 + 1 = 11: worker 1.
    With overlap_score_weight 3: 12 + 20 = 32 against 30 + 1 = 31: still 1; weight 4: 16 + 20
    = 36 against 41: worker 0."""
    ix = KeyIndex(2, 16)
    keys = tuple(range(100, 110))
    ix.stored(0, keys[:6])
    loads = [Load(3, 320), Load(1, 16)]
    d = KvOverlap(2, ix).route(req("a", keys, 160), loads)
    assert (d.rank, d.scores) == (1, (24.0, 11.0))
    assert KvOverlap(2, ix, KvOverlapConfig(3.0)).route(req("a", keys, 160), loads).rank == 1
    assert KvOverlap(2, ix, KvOverlapConfig(4.0)).route(req("a", keys, 160), loads).rank == 0


def test_kv_overlap_temperature_samples_by_softmax():
    """Costs 0 and 10 normalise to 0 and 1; at temperature 1 the weights are 1 and e^-1, so the
    cheaper worker wins ~73% of draws; the draws are seeded."""
    class Ix:
        block_size = 16
        def overlap(self, rank, r):
            return (10, 0)[rank]
    r = KvOverlap(2, Ix(), KvOverlapConfig(router_temperature=1.0), seed=3)
    picks = [r.route(req("a", [], 160), [Load(0, 0)] * 2).rank for _ in range(400)]
    assert 0.63 < picks.count(0) / 400 < 0.83


def test_prefix_affinity_rules():
    """Defaults imbalanced_threshold 10, match_rate_threshold 0.1. A on idle replicas: rate 0 <
    0.1: the smallest trees (all), shortest queue among them, lowest id: 0. B shares 1 of 4
    blocks with A: 0.25 >= 0.1: the longest match, replica 0. C with 1 of 20 blocks matching
    (0.05 < 0.1): smallest trees: replicas 1 and 2 (empty): queues 5 and 2: replica 2. Queues
    20, 9, 9: gap 11 > 10: imbalanced: power of two, never replica 0 (any pair with 0 has a
    shorter queue)."""
    r = PrefixAffinity(3, seed=0)
    assert r.route(req("A", [1, 2, 3, 4]), IDLE3)[:2] == (0, "smallest-tree")
    assert r.route(req("B", [1, 9, 9, 9]), IDLE3)[:2] == (0, "prefix-match")
    c = r.route(req("C", [1] + list(range(50, 69))), [Load(0, 0), Load(5, 0), Load(2, 0)])
    assert c[:2] == (2, "smallest-tree")
    ranks = {r.route(req("D", [1, 2]), [Load(20, 0), Load(9, 0), Load(9, 0)]).rank
             for _ in range(30)}
    assert ranks == {1, 2}
    with pytest.raises(ValueError):
        PrefixAffinityConfig(match_rate_threshold=2.0)


def test_block_keys_compact_equals_by_content():
    """A compact prompt and its expansion share the chain only with itself; two compact
    prompts with the same first 32 tokens share two block keys of 16."""
    a = TokenRuns([(0, 40)])
    b = TokenRuns([(0, 32), (900, 8)])
    ka, kb = block_keys(a, 16), block_keys(b, 16)
    assert len(ka) == 2 and ka == kb
    assert block_keys(TokenRuns([(0, 48)]), 16)[:2] == ka


def test_make_router_rejects_unknown():
    with pytest.raises(ValueError, match="router must be one of"):
        make_router("nearest", 2)
