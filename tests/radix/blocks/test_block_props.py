"""Property tests: random request sequences through the block cache, invariants after every op,
and lookups checked against a brute-force oracle (longest cached run of the request's hashes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.hashing import hash_request_tokens
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockState
from radix.events import ListSink, StepEnded, StepStarted
from radix.request import Req

BS = 4
PREFIXES = [list(range(0, 12)), list(range(100, 106)), []]

op = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 2), st.lists(st.integers(0, 3), max_size=14),
              st.sampled_from([None, "salt"])),
    st.tuples(st.just("decode"), st.integers(0, 7), st.integers(0, 3)),
    st.tuples(st.just("free"), st.integers(0, 7)),
)


def oracle_hit(pool: BlockPool, req: Req) -> int:
    """Longest run of cached hashes from block 0, capped at (num_tokens - 1) // BS blocks."""
    tokens = req.all_ids
    hashes = hash_request_tokens(tokens, BS, req.extra_key, req.cache_salt)
    n = 0
    while n < min(len(hashes), (len(tokens) - 1) // BS) and hashes[n] in (
            pool.cached_block_hash_to_block):
        n += 1
    return n * BS


def apply(m: BlockCacheManager, live: list[Req], step: tuple, counter: list[int]) -> None:
    kind = step[0]
    if kind == "start":
        _, p, tail, salt = step
        counter[0] += 1
        req = Req(f"r{counter[0]}", PREFIXES[p] + tail, cache_salt=salt)
        if not req.origin_input_ids:
            return
        want = oracle_hit(m.pool, req)
        hit = m.get_computed_blocks(req)
        assert hit.num_computed_tokens == want
        if m.allocate_slots(req, len(req.origin_input_ids) - want, hit) is None:
            m.free(req)  # could not admit: drop the request state
        else:
            live.append(req)
    elif kind == "decode" and live:
        req = live[step[1] % len(live)]
        req.output_ids.append(step[2])
        if m.allocate_slots(req, 1) is None:
            req.output_ids.pop()
    elif kind == "free" and live:
        m.free(live.pop(step[1] % len(live)))


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40), st.integers(2, 12), st.booleans())
def test_invariants_after_every_op(ops, num_blocks, with_sink):
    sink = ListSink() if with_sink else None
    m = BlockCacheManager(BlockPool(num_blocks, block_size=BS, sink=sink))
    live: list[Req] = []
    counter = [0]
    for step in ops:
        apply(m, live, step, counter)
        m.check_invariants()
        snap = m.snapshot()
        assert snap.num_free == m.pool.get_num_free_blocks()
        assert sum(1 for s in snap.blocks if s.state == "in_use") + snap.num_free == num_blocks - 1
    for req in live:
        m.free(req)
    m.check_invariants()
    assert m.pool.get_num_free_blocks() == num_blocks - 1
    if sink is not None:  # steps are balanced and numbered 0, 1, 2, ...
        starts = [e.step for e in sink.events if isinstance(e, StepStarted)]
        ends = [e.step for e in sink.events if isinstance(e, StepEnded)]
        assert starts == ends == list(range(len(starts)))


@settings(max_examples=60, deadline=None)
@given(st.lists(op, max_size=30))
def test_sink_does_not_change_behaviour(ops):
    """The same ops with and without a sink leave identical pools."""
    runs = []
    for sink in (None, ListSink()):
        m = BlockCacheManager(BlockPool(6, block_size=BS, sink=sink))
        live: list[Req] = []
        counter = [0]
        for step in ops:
            apply(m, live, step, counter)
        runs.append(m.snapshot()._replace(step=0))
    assert runs[0] == runs[1]


def _snapshot_as_written(pool: BlockPool, owners: dict) -> tuple:
    """take_snapshot as it read before its pass was inlined (the oracle): every block's state,
    parent, free place, owners and low-64 hashes; the counts."""
    from radix.blocks.hashing import hash_to_int64

    reach: set = set()
    firsts = sorted((pool.get_cached_block(h) for h in pool.cached_block_hash_to_block),
                    key=lambda b: b.chain_pos)
    for b in firsts:
        if b.chain_pos == 0 or b.parent_hash in reach:
            reach.add(b.block_hash)
    free_pos = {b.block_id: i for i, b in enumerate(pool.free_block_queue)}
    rows = []
    for b in pool.blocks[1:]:
        h, ph = b.block_hash, b.parent_hash
        state = ("in_use" if b.ref_cnt > 0 else "free" if h is None
                 else "cached_free" if h in reach else "unreachable")
        parent = (pool.get_cached_block(ph).block_id if h is not None and ph is not None
                  and ph in pool.cached_block_hash_to_block else None)
        rows.append((b.block_id, state, b.ref_cnt, None if h is None else hash_to_int64(h),
                     None if h is None else b.chain_pos, parent, free_pos.get(b.block_id),
                     tuple(owners.get(b.block_id, ())),
                     None if h is None or ph is None else hash_to_int64(ph)))
    lost = sum(1 for r in rows if r[1] == "unreachable") + sum(
        1 for r in rows if r[1] == "in_use" and r[3] is not None
        and pool.blocks[r[0]].block_hash not in reach)
    return (tuple(rows), pool.block_size, pool.num_blocks, len(free_pos),
            sum(1 for r in rows if r[3] is not None), lost)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(-1, 5),
                          st.integers(0, 3), st.booleans()), min_size=1, max_size=14))
def test_snapshot_is_the_plain_pass_over_the_blocks(rows):
    """take_snapshot (one inlined pass) against the pass as written before, on pools set block
    by block: (ref_cnt, hash, parent hash, chain position, cached under its hash); hashes
    shared by several blocks, chains broken above a block (unreachable, in use or free)."""
    from radix.blocks.pool import FreeKVCacheBlockQueue
    from radix.blocks.snapshot import take_snapshot

    pool = BlockPool(len(rows) + 1, block_size=BS)
    digest = [bytes([k]) * 32 for k in range(6)]
    cache: dict = {}
    for b, (ref, h, ph, pos, cached) in zip(pool.blocks[1:], rows):
        b.ref_cnt = ref
        if cached:
            b.block_hash, b.chain_pos = digest[h], pos
            b.parent_hash = digest[ph] if ph >= 0 and pos else None
            held = cache.get(b.block_hash)
            cache[b.block_hash] = (b if held is None else {**held, b.block_id: b}
                                   if type(held) is dict else {held.block_id: held, b.block_id: b})
    pool.cached_block_hash_to_block = cache
    pool.free_block_queue = FreeKVCacheBlockQueue([b for b in pool.blocks[:0:-1] if not b.ref_cnt])
    owners = {b.block_id: ["r1", "r2"][:b.ref_cnt] for b in pool.blocks if b.ref_cnt}
    snap = take_snapshot(pool, owners, 7)
    assert (snap.step, tuple(snap)[:-1]) == (7, _snapshot_as_written(pool, owners))
    assert all(type(b) is BlockState for b in snap.blocks)
