"""BlockCacheManager's one interface under both storages, a BlockPool and an ExtentPool: the
oracle drives both the same way on random span-structured request programs with small pools and
holds them equal (hits, allocation failures, free counts, cached counts, evictions, free-queue
order block by block, named by what each caches, unreachable blocks); known-answer tests run
under each storage; what extents cannot name raises UnsupportedByStorage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.hashing import hash_request_tokens
from radix.blocks.manager import BlockCacheManager, ExtentPool, UnsupportedByStorage
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.tokens import RunList, TokenRuns

NAMESPACES = [(None, None), ("lora-a", None), (None, "salt-1")]


class Pair:
    """One request as both managers see it: plain lists, and compact runs."""

    def __init__(self, rid: str, spans: list[tuple[int, int]], ns: tuple, output_len: int):
        tokens = TokenRuns(spans)
        self.plain = Req(rid, list(tokens), extra_key=ns[0], cache_salt=ns[1])
        self.compact = Req(rid, tokens, output_ids=RunList(), extra_key=ns[0], cache_salt=ns[1])
        self.output_len = output_len
        self.next_out = 10_000 + int(rid[1:]) * 100
        self.computed = 0  # tokens allocated so far (0: not started)
        self.live = False

    def emit(self, k: int) -> None:
        for _ in range(k):
            self.plain.output_ids.append(self.next_out)
            self.compact.output_ids.append(self.next_out)
            self.next_out += 1

    def num_tokens(self) -> int:
        return len(self.plain.origin_input_ids) + len(self.plain.output_ids)


def names(pool: BlockPool, pairs: list[Pair]) -> list:
    """BlockPool's free queue, named like ExtentPool.free_queue."""
    by_hash = {}
    bs = pool.block_size
    for p in pairs:
        toks = p.plain.all_ids
        ns = (p.plain.extra_key or None, p.plain.cache_salt or None)
        for k, h in enumerate(hash_request_tokens(toks, bs, p.plain.extra_key,
                                                  p.plain.cache_salt)):
            by_hash[h] = (ns, tuple(toks[:(k + 1) * bs]))
    return [None if b.block_hash is None else by_hash[b.block_hash]
            for b in pool.free_block_queue]


def cached_blocks(pool: BlockPool) -> int:
    return sum(1 for b in pool.blocks if b.block_hash is not None)


span = st.tuples(st.integers(0, 3), st.integers(1, 9))  # (which shared span, its length)
request = st.tuples(st.lists(span, min_size=1, max_size=4), st.integers(0, 2),
                    st.integers(0, 6))
program = st.tuples(
    st.sampled_from([1, 2, 4]),  # block size
    st.integers(2, 12),  # pool blocks (block 0 is null)
    st.lists(request, min_size=2, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8), st.integers(0, 3)), min_size=10,
             max_size=80),  # (which request, how many tokens/blocks, 0: free it)
    st.booleans(),  # caching enabled
)


@settings(max_examples=300, deadline=None)
@given(program)
def test_extent_storage_equals_block_storage(prog):
    bs, num_blocks, reqs, ops, caching = prog
    pool = BlockPool(num_blocks, bs, enable_caching=caching)
    per_block = BlockCacheManager(pool)
    ext = BlockCacheManager(ExtentPool(num_blocks, bs, enable_caching=caching))
    pairs = [Pair(f"r{i}", [(s * 40, n) for s, n in spans], NAMESPACES[ns], out)
             for i, (spans, ns, out) in enumerate(reqs)]
    for which, amount, free in ops:
        p = pairs[which % len(pairs)]
        if free == 0 and p.live:  # preemption / finish: free, start over later
            per_block.free(p.plain)
            ext.free(p.compact)
            p.live, p.computed = False, 0
        elif not p.live:  # (re)admission: look up, then allocate a first chunk
            a = per_block.get_computed_blocks(p.plain)
            b = ext.get_computed_blocks(p.compact)
            assert a[1:] == b[1:]  # all but the hits' representation
            chunk = min(amount * bs, p.num_tokens() - a.num_computed_tokens)
            ra = per_block.allocate_slots(p.plain, chunk, a)
            rb = ext.allocate_slots(p.compact, chunk, b)
            assert (ra is None) == (rb is None)
            if ra is None:
                per_block.free(p.plain)
                ext.free(p.compact)
            else:
                p.live, p.computed = True, a.num_computed_tokens + chunk
        else:  # more prompt, or decode tokens (several at once: the simulator's fast path)
            room = p.num_tokens() - p.computed
            if room == 0 and len(p.plain.output_ids) < p.output_len:
                p.emit(min(amount, p.output_len - len(p.plain.output_ids)))
                room = p.num_tokens() - p.computed
            k = min(amount, room)
            ra = per_block.allocate_slots(p.plain, k)
            rb = ext.allocate_slots(p.compact, k)
            assert (ra is None) == (rb is None)
            if ra is None:
                per_block.free(p.plain)
                ext.free(p.compact)
                p.live, p.computed = False, 0
            else:
                p.computed += k
        assert ext.num_free_blocks == per_block.num_free_blocks == pool.get_num_free_blocks()
        assert ext.pool.num_cached_blocks == cached_blocks(pool)
        assert ext.num_evictions == per_block.num_evictions
        assert ext.pool.free_queue() == names(pool, pairs)
        ext.check_invariants()
        per_block.check_invariants()
    assert ext.num_unreachable_blocks() == per_block.num_unreachable_blocks()
    assert ext.lookups == per_block.lookups


def test_duplicates_and_the_last_token_cap():
    """Block size 4, a 12-token prompt (3 full blocks) run twice, one at a time. The second
    lookup is capped at (12 - 1) // 4 = 2 blocks, so its third block is recomputed and cached
    again: two blocks carry that hash (vLLM does not dedupe), and a third run hits the first
    carrier. Both managers agree on every count."""
    pool = BlockPool(16, 4)
    per_block, ext = BlockCacheManager(pool), BlockCacheManager(ExtentPool(16, 4))
    for i in range(3):
        plain, compact = Req(f"r{i}", list(range(12))), Req(f"r{i}", TokenRuns([(0, 12)]))
        a, b = per_block.get_computed_blocks(plain), ext.get_computed_blocks(compact)
        assert a.num_computed_tokens == b.num_computed_tokens == (0 if i == 0 else 8)
        assert b.reason == ("miss" if i == 0 else "cap")
        per_block.allocate_slots(plain, 12 - a.num_computed_tokens, a)
        ext.allocate_slots(compact, 12 - b.num_computed_tokens, b)
        per_block.free(plain)
        ext.free(compact)
    assert ext.pool.num_cached_blocks == cached_blocks(pool) == 5  # 3 + one duplicate per rerun
    ext.check_invariants()


def test_a_million_token_prompt_costs_runs_not_blocks():
    """2,000 requests of 512k tokens sharing a 256k prefix, block size 16: 32,768 shared
    blocks hit by every request after the first; the pool (10^8 blocks) is a count, not objects."""
    ext = BlockCacheManager(ExtentPool(10**8, 16))  # 1.6 G tokens: all 2,000 x 256k own tokens
    shared = TokenRuns([(0, 1 << 18)])
    for i in range(2000):
        req = Req(f"r{i}", shared + TokenRuns([(10**9 + i * (1 << 18), 1 << 18)]))
        hit = ext.get_computed_blocks(req)
        assert hit.num_computed_tokens == (0 if i == 0 else 1 << 18)
        ext.allocate_slots(req, (1 << 19) - hit.num_computed_tokens, hit)
        ext.free(req)
    assert ext.num_evictions == 0 and ext.pool.trie.num_nodes <= 2001


STORAGES = {"blocks": BlockPool, "extents": ExtentPool}


@pytest.mark.parametrize("storage", STORAGES)
def test_one_interface_known_answer(storage):
    """Pool of 8 blocks of 4 tokens (block 0 is null: 7 usable). r1, 10 tokens: no hit, takes
    ceil(10 / 4) = 3 blocks and caches its 10 // 4 = 2 full ones; freed, 7 are free again, 2 of
    them cached. r2, 9 tokens: capped at (9 - 1) // 4 = 2 blocks = 8 tokens, both cached: hit 8,
    reason "partial" (block 2 holds 1 token, not full). r3 wants 6 blocks (24 tokens, no
    hit): 7 - 3 held by r2 = 4 free: None, nothing changes; lookup r3 then: "miss" at block 0."""
    m = BlockCacheManager(STORAGES[storage](8, block_size=4))
    r1 = Req("r1", list(range(10)))
    hit = m.get_computed_blocks(r1)
    assert hit[1:] == (0, 0, 0, "miss")
    new = m.allocate_slots(r1, 10, hit)
    assert (len(new) if storage == "blocks" else new) == 3
    m.free(r1)
    assert m.num_free_blocks == 7
    r2 = Req("r2", list(range(9)))
    hit = m.get_computed_blocks(r2)
    assert hit[1:] == (8, 2, 2, "partial")
    assert m.allocate_slots(r2, 1, hit) is not None
    assert m.num_free_blocks == 4 and m.num_evictions == 0
    r3 = Req("r3", list(range(100, 124)))
    hit = m.get_computed_blocks(r3)
    assert m.allocate_slots(r3, 24, hit) is None and m.num_free_blocks == 4
    assert [r.reason for r in m.lookups] == ["miss", "partial", "miss"]
    m.check_invariants()
    assert m.num_unreachable_blocks() == 0


def test_extents_name_no_blocks():
    """An ExtentPool counts blocks and names none: block ids, KV events, snapshots, block refs
    and a prefix-cache reset raise UnsupportedByStorage; a BlockPool takes no prepaid blocks and
    keeps no eviction marks."""
    ext = BlockCacheManager(ExtentPool(8, block_size=4))
    r = Req("r1", list(range(10)))
    ext.allocate_slots(r, 10, ext.get_computed_blocks(r))
    for call in (lambda: ext.get_block_ids("r1"), ext.take_events, ext.snapshot, ext.block_refs,
                 ext.reset_prefix_cache):
        with pytest.raises(UnsupportedByStorage):
            call()
    with pytest.raises(UnsupportedByStorage):
        BlockCacheManager(ExtentPool(8), hash_memo=True)
    blocks = BlockCacheManager(BlockPool(8, block_size=4))
    with pytest.raises(UnsupportedByStorage):
        blocks.reserve_blocks(1)
    with pytest.raises(UnsupportedByStorage):
        blocks.last_eviction([1, 2, 3, 4], (None, None), 0)
