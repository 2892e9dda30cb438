"""Known-answer tests for RadixCache (radix/tree/radix_cache.py); docstrings show the arithmetic."""

from __future__ import annotations

import pytest

from radix.cli.demo import DEMO_KEYS, three_request_keys
from radix.request import Req, SlotAllocator
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache


def demo_cache(**kw) -> RadixCache:
    c = RadixCache(**kw)
    for k in DEMO_KEYS:
        c.insert(RadixKey(k))
    return c


def test_demo_tree_prints_like_sglang():
    """SGLang's radix_cache.py demo: 3 + 4 + 6 + 5 inserted tokens dedupe to 2+1+2+2+5 = 12."""
    text = demo_cache().pretty_print()
    assert text.splitlines() == [
        " 0 [] r=1",
        "   5 [8, 9, 10, 11, 12] r=0",
        "   2 [1, 2] r=0",
        "     2 [4, 5] r=0",
        "       2 [6, 7] r=0",
        "     1 [3] r=0",
        "#tokens: 12",
    ]


def test_demo_match_and_hit_counts():
    """[1,2,3,13,14] matches [1,2] + [3]; hit counts: [1,2] was walked by 4 inserts."""
    c = demo_cache()
    m = c.match_prefix(RadixKey([1, 2, 3, 13, 14]))
    assert (m.prefix_len, m.slot_ids) == (3, [1, 2, 3])
    hits = {tuple(n.token_ids): n.hit_count for n in c.snapshot().nodes}
    assert hits == {(): 0, (1, 2): 4, (3,): 2, (4, 5): 2, (6, 7): 1, (8, 9, 10, 11, 12): 1}


def test_three_request_walk_numbers():
    """R1 = 512+1,543+96 = 2,151; R2 = 2,135; R3 = 2,624: apart 6,910.
    Tree: 2,055 (S+F, of which 512 is S) + 96 + 80 + 2,112 = 4,343; saved 2,567."""
    c = RadixCache()
    keys = three_request_keys()
    got = [c.insert(RadixKey(k)).prefix_len for k in keys.values()]
    assert got == [0, 2055, 512]
    assert c.total_size() == 4343
    assert sum(map(len, keys.values())) == 6910
    assert 6910 - c.total_size() == 2567
    assert 2567 * 131_072 // 2**20 == 320  # 320.9 MiB, shown as 321 MiB


def test_split_on_read_keeps_lock_ref_on_both_halves():
    """A locked 6-token leaf split at 2 by a read: both halves carry r=1, sizes unchanged."""
    c = RadixCache()
    leaf = c.insert([1, 2, 3, 4, 5, 6]).last_node
    c.inc_lock_ref(leaf)
    m = c.match_prefix([1, 2, 9])
    assert m.prefix_len == 2 and m.last_node is not leaf
    assert (m.last_node.lock_ref, leaf.lock_ref) == (1, 1)
    assert len(leaf.key) == 4 and leaf.parent is m.last_node
    assert (c.protected_size(), c.evictable_size()) == (6, 0)
    c.check_invariants()
    c.dec_lock_ref(leaf)
    assert (c.protected_size(), c.evictable_size()) == (0, 6)
    c.check_invariants()


def test_match_never_changes_hits_or_priority_and_writes_one_time():
    c = RadixCache()
    c.insert([1, 2, 3], priority=5)
    before = {n.id: (n.hit_count, n.priority) for n in c.snapshot().nodes}
    c.match_prefix([1, 2, 3, 4])
    after = c.snapshot()
    assert {n.id: (n.hit_count, n.priority) for n in after.nodes} == before
    assert len({n.last_access_time for n in after.nodes}) == 1  # root and [1,2,3]: one time


def test_dead_branch_is_evicted_in_one_call_by_cascade():
    """A chain [1..4] -> [5,6] -> [7] with nothing locked: evict(7) takes the leaf, then its
    parent (now a leaf), then the grandparent, in one call: 1 + 2 + 4 = 7 tokens."""
    c = RadixCache()
    c.insert([1, 2, 3, 4, 5, 6, 7])
    c.match_prefix([1, 2, 3, 4, 9])  # split after 4
    c.match_prefix([1, 2, 3, 4, 5, 6, 9])  # split after 6
    r = c.evict(7)
    assert [len(n.key) for n in r.evicted_nodes] == [1, 2, 4]
    assert r.num_evicted == 7 and c.total_size() == 0
    c.check_invariants()


def test_eviction_question_interior_prefix_survives():
    """S (512) shared by 400 live conversations (locked), plus S + 2,112 RAG tokens finished.
    Freeing 300 tokens can only take the dead 2,112-token leaf (overshoot: whole nodes go)."""
    c = RadixCache()
    s = list(range(512))
    for i in range(400):
        node = c.insert(s + [10_000 + i] * 2).last_node
        c.inc_lock_ref(node)
    c.insert(s + list(range(20_000, 22_112)))
    r = c.evict(300)
    assert [len(n.key) for n in r.evicted_nodes] == [2112]
    assert c.match_prefix(s).prefix_len == 512
    assert c.evict(10_000).num_evicted == 0  # everything left is locked or interior
    c.check_invariants()


POLICY_ORDERS = {
    # leaves A (created t1, hit once, prio 0), B (t2, hits 3, prio 1), C (t3, hit 2, prio 2);
    # last access: A touched last (t5), then C (t4), B (t2 from its inserts)
    "lru": ["B", "C", "A"],
    "mru": ["A", "C", "B"],
    "fifo": ["A", "B", "C"],
    "filo": ["C", "B", "A"],
    "lfu": ["A", "C", "B"],
    "priority": ["A", "B", "C"],
    "slru": ["A", "B", "C"],  # probationary A (1 hit) first; B (3) and C (2) protected, by LRU
}


@pytest.mark.parametrize("policy", sorted(POLICY_ORDERS))
def test_each_policy_eviction_order(policy):
    """A inserted once (prio 0), B three times (hits 3, prio 1), C twice (hits 2, prio 2), then
    C matched, then A matched. Last access: B < C < A, so LRU pops B, C, A; creation: A < B < C."""
    c = RadixCache(eviction_policy=policy)
    a, b, cc = [1, 1], [2, 2], [3, 3]
    c.insert(a, priority=0)
    for _ in range(3):
        c.insert(b, priority=1)
    for _ in range(2):
        c.insert(cc, priority=2)
    c.match_prefix(cc)
    c.match_prefix(a)
    names = {1: "A", 2: "B", 3: "C"}
    order = [names[n.key.token_ids[0]] for n in c.evict(6).evicted_nodes]
    assert order == POLICY_ORDERS[policy]


def test_slru_threshold_is_configurable():
    c = RadixCache(eviction_policy="slru", policy_config={"protected_threshold": 4})
    c.insert([1]); c.insert([2]); c.insert([2])  # noqa: E702
    c.match_prefix([1])  # [1] is now the most recent, but both are probationary (< 4 hits)
    assert [n.key.token_ids[0] for n in c.evict(2).evicted_nodes] == [2, 1]
    with pytest.raises(ValueError):
        RadixCache(eviction_policy="slru", policy_config={"bogus": 1})


def test_page_size_aligns_matches_and_inserts():
    """page 4: a 10-token key caches 8; a match of 7 tokens sees 4."""
    c = RadixCache(page_size=4)
    assert c.insert(list(range(10))).last_node.key.token_ids == list(range(8))
    assert c.total_size() == 8
    assert c.match_prefix(list(range(7))).prefix_len == 4
    assert c.match_prefix([0, 1, 2, 3, 4, 5, 9, 9]).prefix_len == 4  # page 2 differs
    c.check_invariants()


def test_namespaces_never_share_nodes():
    c = RadixCache()
    c.insert(RadixKey([1, 2, 3], extra_key="lora-a"))
    assert c.match_prefix(RadixKey([1, 2, 3])).prefix_len == 0
    assert c.match_prefix(RadixKey([1, 2, 3], cache_salt="t1")).prefix_len == 0
    assert c.match_prefix(RadixKey([1, 2, 3], extra_key="lora-a")).prefix_len == 3
    assert RadixKey([1]).child_key() != RadixKey([1], extra_key="x").child_key()


def test_disabled_cache_matches_nothing():
    c = RadixCache(disable=True)
    assert c.insert([1, 2, 3]).prefix_len == 0
    assert c.match_prefix([1, 2, 3]).prefix_len == 0 and c.total_size() == 0


def test_request_lifecycle_frees_duplicates():
    """R1 (4 prompt + 2 output) commits 4 + 2 - 1 = 5 slots; R2 shares 3 prompt tokens:
    it matches 3 through the tree and frees nothing twice."""
    a = SlotAllocator(32)
    c = RadixCache(allocator=a)
    r1 = Req("r1", [1, 2, 3, 4], output_ids=[7, 8], slot_ids=a.alloc(5))
    r1.last_node = c.root_node
    c.cache_finished_req(r1)
    assert (c.total_size(), a.available_size()) == (5, 27)
    m = c.match_prefix([1, 2, 3, 5])
    r2 = Req("r2", [1, 2, 3, 5], prefix_indices=m.slot_ids, cache_protected_len=3,
             last_node=m.last_node, slot_ids=m.slot_ids + a.alloc(1))
    c.inc_lock_ref(m.last_node)
    r2.fill_ids = r2.origin_input_ids
    c.cache_unfinished_req(r2)
    assert r2.cache_protected_len == 4 and r2.last_node.lock_ref == 1
    r2.output_ids = [9]
    c.cache_finished_req(r2)
    assert c.total_size() == 6 and a.available_size() == 26 and c.protected_size() == 0
    c.check_invariants()
    a.check_invariants()


def test_chunked_insert_does_not_count_hits():
    c = RadixCache()
    c.insert([1, 2, 3], chunked=True)
    c.insert([1, 2, 3], chunked=True)
    assert c.snapshot().nodes[1].hit_count == 0


@pytest.mark.parametrize("bad", [[1, "x"], [1.5], "abc", None])
def test_bad_token_ids_raise_and_leave_the_tree_intact(bad):
    c = demo_cache()
    with pytest.raises(TypeError):
        c.insert(bad)
    c.check_invariants()


def test_bad_evict_and_unlock_raise_and_leave_the_tree_intact():
    c = demo_cache()
    with pytest.raises(ValueError):
        c.evict(-1)
    node = c.match_prefix([1, 2, 3]).last_node
    with pytest.raises(ValueError, match="holds no lock"):
        c.dec_lock_ref(node)
    c.evict(100)
    with pytest.raises(ValueError, match="not a live node"):
        c.inc_lock_ref(node)
    c.check_invariants()


def test_concurrent_duplicates_are_freed_at_finish():
    """Two requests compute the same 4-token prompt side by side (neither hit the cache).
    A finishes first: 4 + 1 - 1 = 4 slots go into the tree. B's insert then finds all 4
    cached (prefix_len 4 > its cache_protected_len 0), so B's 4 slots are duplicates and
    are freed: the pool ends with 4 used of 16."""
    a = SlotAllocator(16)
    c = RadixCache(allocator=a)
    reqs = []
    for rid in ("A", "B"):
        r = Req(rid, [1, 2, 3, 4], output_ids=[9], slot_ids=a.alloc(4))
        r.last_node = c.root_node
        reqs.append(r)
    for r in reqs:
        c.cache_finished_req(r)
    assert a.available_size() == 12 and c.total_size() == 4
    c.check_invariants()


def test_evict_survives_a_heap_rebuild_in_the_same_call(monkeypatch):
    """Regression: with no slack, every parent that becomes a leaf during evict triggers a heap
    rebuild while evict is popping. 100 two-node chains [i] -> [i+1000] (a split made by a
    read): one evict of everything must take all 200 nodes, 100 * (1 + 1) = 200 tokens."""
    import radix.tree.evict_policy

    monkeypatch.setattr(radix.tree.evict_policy, "HEAP_SLACK", 0)
    c = RadixCache()
    for i in range(100):
        c.insert([i, 1000 + i])
        c.match_prefix([i, 5000])  # splits [i, 1000+i] into [i] -> [1000+i]
    r = c.evict(10_000)
    assert (r.num_evicted, len(r.evicted_nodes), c.total_size()) == (200, 200, 0)
    c.check_invariants()


def test_disabled_cache_keeps_a_chunk_as_the_request_prefix():
    """SGLang's ChunkCache: with the cache off, cache_unfinished_req caches nothing but hands
    the request its own 3 computed slots as the prefix of its next chunk."""
    a = SlotAllocator(8)
    c = RadixCache(disable=True, allocator=a)
    r = Req("r", [1, 2, 3, 4, 5], slot_ids=a.alloc(3), fill_ids=[1, 2, 3])
    c.cache_unfinished_req(r, chunked=True)
    assert r.prefix_indices == [1, 2, 3] and c.total_size() == 0


def test_long_first_edge_is_compared_in_place_and_exactly():
    """A first edge of >= GUARD_MIN_LEN (64) tokens is checked by the PrefixProbe, not a slice.

    Cached: [1000 .. 1199] (200 tokens) and it + [7 8]. Keys: the edge itself (len == 200: a
    plain compare), the edge + 5 tokens (the probe is reached: 200), a difference at token 0
    (no child: 0) and at 150 (150; the edge is cut 150 + 50, the new first edge has no guard
    yet), the edge + [9] as equal ints that are other objects (150 + 50 = 200, slots = the
    edge), a difference at 120 the same way (120)."""
    edge = list(range(1000, 1200))
    c = RadixCache()
    c.insert(RadixKey(edge))
    c.insert(RadixKey(edge + [7, 8]))
    assert c.match_prefix(RadixKey(list(edge))).prefix_len == 200
    assert c.match_prefix(RadixKey(edge + [1, 2, 3, 4, 5])).prefix_len == 200
    first = next(iter(c.root_node.children.values()))
    assert first.guarded_key is not None and first.guarded_key[:-1] == edge
    for at, want in ((0, 0), (150, 150)):
        bad = edge + [7]
        bad[at] = -1
        assert c.match_prefix(RadixKey(bad)).prefix_len == want
    first = next(iter(c.root_node.children.values()))
    assert len(first.key) == 150 and first.guarded_key is None
    copies = [int(str(t)) for t in edge]  # equal values, no identity shortcut
    r = c.match_prefix(RadixKey(copies + [9]))
    assert r.prefix_len == 200 and r.slot_ids == edge
    copies[120] = -1
    assert c.match_prefix(RadixKey(copies + [9])).prefix_len == 120
    c.check_invariants()
