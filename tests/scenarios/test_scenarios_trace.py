"""scenarios/trace.py and its helpers: compact sequences, the compact log, block keyframes, the
replay (index, rejections, an op log that fails), memory budgets and the worker pool."""

from __future__ import annotations

import dataclasses
import gc
import json
import random
import threading
import weakref
from pathlib import Path

import pytest
from blockhelp import pool_state
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.runs.compare import compare, output_tokens, run_blocks, trace_reqs
from radix.tokens import TokenRuns
from radix.traces import TraceError, load_trace
from radix.tree.radix_cache import RadixCache
from runtime.budget import Budget, BudgetError
from runtime.jobs import JobPool, QueueFull
from scenarios import blockframes
from scenarios import trace as trace_run
from scenarios.blockbuilder import ArrayPool
from scenarios.blockframes import BlockFrames, capture, restore
from scenarios.trace import CompactLog, compact, nbytes, replay, search

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"
BIG = Budget(2**34, 2**35)


def _lines(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@given(st.lists(st.integers(0, 40), max_size=60))
def test_compact_is_the_same_sequence(values):
    """TokenRuns or array: equal to the input, same length, same items, same slices."""
    c = compact(values)
    assert list(c) == values and len(c) == len(values)
    if values:
        i = len(values) // 2
        assert c[i] == values[i] and list(c[1:i + 1]) == values[1:i + 1]


def test_compact_picks_runs_for_mooncake_shaped_tokens():
    """Mooncake unit u stands for u*512 .. u*512+511: 3 units -> 3 runs of 512, 3 x 80 = 240
    bytes instead of 1,536 x 8."""
    tokens = [u * 512 + k for u in (7, 3, 9) for k in range(512)]
    c = compact(tokens)
    assert isinstance(c, TokenRuns) and nbytes(c) == 240 and list(c[510:514]) == tokens[510:514]


def test_compact_log_keeps_the_replay_law():
    """A random run into the compact log: every step's snapshot equals a plain cache's."""
    rng = random.Random(0)
    log, cache = CompactLog(keyframe_every=4), None
    cache = RadixCache(sink=log)
    plain = RadixCache()
    for i in range(60):
        key = [rng.randrange(3)] + list(range(i % 5, i % 5 + rng.randrange(1, 9)))
        cache.insert(key)
        plain.insert(key)
        if i % 7 == 6:
            cache.evict(5)
            plain.evict(5)
    assert log.snapshot_at(log.num_steps) == plain.snapshot() == cache.snapshot()
    assert log.nbytes > 0
    # a step rebuilt from a keyframe keeps the compact sequences (a keyframe's copy once lost
    # the compact model and expanded every later leaf into a list of ints)
    kinds = {type(r.key.token_ids) for step in range(log.num_steps + 1)
             for nid, r in log.model_at(step).nodes.items() if nid}
    assert kinds and not kinds & {list, tuple}, kinds


def _trace_reqs(trace, start, stop):
    reqs = trace_reqs(trace)
    return [(reqs[i], output_tokens(trace, i)) for i in range(start, stop)]


def test_compact_log_keeps_every_field_of_the_events_it_rebuilds():
    """CompactLog rebuilds NodeInserted and NodeEvicted field by field: every field (none
    at its default) comes through, the sequences compacted but equal."""
    from radix import events as ev

    log = CompactLog()
    log.emit(ev.StepStarted(0, "insert"))
    ins = ev.NodeInserted(1, 0, (5, 6, 7), (10, 11, 12), 3, 2.5, "lora-a", "salt")
    log.emit(ins)
    log.emit(ev.NodeEvicted(1, 0, 3, (10, 11, 12), (0, 2.5, 1)))
    log.emit(ev.StepEnded(0, "insert"))
    got_ins, got_ev = log.events_of(0)[1:3]
    for want, got in ((ins, got_ins), (ev.NodeEvicted(1, 0, 3, (10, 11, 12), (0, 2.5, 1)),
                                        got_ev)):
        for f in dataclasses.fields(want):
            a, b = getattr(want, f.name), getattr(got, f.name)
            assert (list(a) == list(b)) if isinstance(a, tuple) and f.name != "sort_key" \
                else a == b, f.name
            assert a != f.default, f"give {f.name} a value that is not its default"


def test_block_keyframes_equal_a_replay_from_scratch():
    """Oracle: the pool after n requests from a keyframe + run_blocks equals run_blocks over
    the first n requests from an empty pool (its snapshot, and byte for byte its keyframe),
    for n across keyframes (every 4); a restored pool passes its invariants; totals agree
    with radix.runs.compare."""
    trace = load_trace(TRACES / "eviction_question.jsonl.gz")
    n = len(trace.requests)
    frames = BlockFrames(n, lambda a, b: _trace_reqs(trace, a, b), 2_000, 16, every=4)
    assert frames.stats["hit_tokens"] == compare(trace, 2_000)["blocks"]["hit_tokens"]
    for k in (0, 3, 4, 9, n - 1, n, 5):
        fresh = BlockCacheManager(BlockPool(2_000 // 16 + 1, 16))
        pairs = _trace_reqs(trace, 0, k)
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2_000, 16, manager=fresh)
        assert frames.at(k).snapshot == fresh.snapshot(), k
        assert capture(frames.manager_at(k)) == capture(fresh), k
    restore(capture(frames.manager_at(7))).check_invariants()


def test_block_keyframes_let_go_of_their_builder_after_the_pass(monkeypatch):
    """The array pool and its trie serve only the one pass that builds the keyframes: once
    BlockFrames is made they are freed (a trie holds an id per distinct block prefix of the
    trace), and every step still comes from the keyframes."""
    trace = load_trace(TRACES / "eviction_question.jsonl.gz")
    n = len(trace.requests)
    made = []

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - ArrayPool's own
        made.append(ArrayPool(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(blockframes, "ArrayPool", spy)
    frames = BlockFrames(n, lambda a, b: _trace_reqs(trace, a, b), 2_000, 16, every=4)
    pool, trie = weakref.ref(made[0]), weakref.ref(made[0].memo.trie)
    made.clear()
    gc.collect()
    assert pool() is None and trie() is None and len(frames.frames) == frames.num_frames
    for k in (n, 5, n - 1):
        fresh = BlockCacheManager(BlockPool(2_000 // 16 + 1, 16))
        pairs = _trace_reqs(trace, 0, k)
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2_000, 16, manager=fresh)
        assert frames.at(k).snapshot == fresh.snapshot(), k


@given(st.integers(0, 10**6), st.sampled_from([1, 2, 4]))
@settings(max_examples=40, deadline=None)
def test_a_keyframe_restores_every_field(seed, block_size):
    """capture -> restore (fresh, and into a used manager) gives back every block's hash,
    parent hash, chain position, the free queue's order and the hash map (its order and the
    groups of blocks that share a hash), on a pool small enough to evict parents before their
    children and to cache one hash twice (a fully cached prompt recomputes its last block)."""
    rng = random.Random(seed)
    m = BlockCacheManager(BlockPool(12, block_size))
    other = BlockCacheManager(BlockPool(12, block_size))
    seen: list[list[int]] = []
    for i in range(40):
        prompt = (list(rng.choice(seen)) if seen and rng.random() < 0.3 else
                  [rng.randrange(3) for _ in range(rng.randrange(1, 20))])
        seen.append(prompt)
        out = [50 + rng.randrange(9) for _ in range(rng.randrange(0, 6))]
        run_blocks([Req(f"r{i}", prompt)], [out], 12 * block_size, block_size, manager=m)
        run_blocks([Req(f"o{i}", prompt[::-1])], [out], 12 * block_size, block_size,
                   manager=other)
        frame = capture(m)
        assert pool_state(restore(frame)) == pool_state(m), i
        assert pool_state(restore(frame, into=other)) == pool_state(m), i


@pytest.mark.parametrize("length", [32, 7])
def test_a_keyframe_keeps_a_parent_no_block_carries(length):
    """A cached block whose parent's hash no cached block carries (kept apart in the frame),
    of the hashes' length (joined) or another (kept as a list)."""
    m = BlockCacheManager(BlockPool(6, 2))
    run_blocks([Req("a", [1, 2, 3, 4, 5, 6])], [[9]], 12, 2, manager=m)
    child = next(b for b in m.pool.blocks if b.chain_pos == 2)
    child.parent_hash = b"p" * length
    assert pool_state(restore(capture(m))) == pool_state(m)


@pytest.mark.parametrize("name, capacity", [("eviction_question.jsonl.gz", 2_000),
                                            ("customer_support.jsonl.gz", 8_000),
                                            ("mooncake_excerpt.jsonl", 120_000)])
def test_block_summary_equals_the_per_block_pool(name, capacity):
    """Oracle: the summary (from the block-extent cache) equals a per-block BlockCacheManager
    run request by request: the totals, the rejected requests, every LookupRecord and the
    eviction count after each request; capacities small enough to evict (and, for the
    eviction question, to reject). The same pass keeps every keyframe."""
    trace = load_trace(TRACES / name)
    n = len(trace.requests)
    frames = BlockFrames(n, lambda a, b: _trace_reqs(trace, a, b), capacity, 16,
                         every=4)
    assert len(frames.frames) == frames.num_frames == n // 4 + 1
    fresh = BlockCacheManager(BlockPool(capacity // 16 + 1, 16))
    rejected, evictions = [], []
    for req, out in _trace_reqs(trace, 0, n):
        run_blocks([req], [out], capacity, 16, manager=fresh, rejected_rids=rejected)
        evictions.append(fresh.pool.num_evictions)
    pairs = _trace_reqs(trace, 0, n)
    want = run_blocks([r for r, _ in pairs], [o for _, o in pairs], capacity, 16,
                      manager=BlockCacheManager(BlockPool(capacity // 16 + 1, 16)))
    assert frames.stats == want
    assert frames.lookups == fresh.lookups and frames.rejected == rejected
    assert frames.evictions == evictions and evictions[-1] > 0
    restored = sum(len(frames.keyframe(k)) for k in range(0, frames.num_frames, 3))  # as bytes
    assert restored <= frames.nbytes <= BlockFrames.max_nbytes(n, capacity, 16, every=4)


def test_the_pass_keeps_every_keyframe_and_the_last_pool():
    """Eviction question: 41 requests, every 4: keyframes 0..10 and the pool after the 41st,
    each byte for byte the pool run_blocks leaves after as many requests from an empty one;
    the pool after 14 (keyframe 3 and two requests) equals a replay from scratch; what they
    hold stays under the bound the session's budget holds before the pass."""
    trace = load_trace(TRACES / "eviction_question.jsonl.gz")
    n = len(trace.requests)
    frames = BlockFrames(n, lambda a, b: _trace_reqs(trace, a, b), 2_000, 16, every=4)
    fresh = {}
    for k in (12, 14, 40, n):
        fresh[k] = BlockCacheManager(BlockPool(2_000 // 16 + 1, 16))
        pairs = _trace_reqs(trace, 0, k)
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2_000, 16, manager=fresh[k])
    assert n == 41 and len(frames.frames) == 11
    assert frames.at(14).snapshot == fresh[14].snapshot()
    assert frames.keyframe(3) == capture(fresh[12]) and frames.keyframe(10) == capture(fresh[40])
    assert frames.keyframe(-1) == capture(fresh[n])
    assert frames.nbytes < BlockFrames.max_nbytes(n, 2_000, 16, every=4)


def test_replay_two_requests_index_and_search():
    """Two requests of one output token: 1 + 2 x 3 = 7 steps (reset; per request match_prefix,
    inc_lock_ref, cache_finished_req). Search finds where each was looked up, admitted,
    finished; a part of an id finds both."""
    data = _lines([{"rid": "a", "arrival": 0, "tokens": [1, 2, 3], "output_len": 1},
                   {"rid": "b", "arrival": 1, "tokens": [1, 2, 4], "output_len": 1}])
    r = replay(data, "two.jsonl", 1_000, budget=BIG)
    assert r.log.num_steps == 7 and r.first_bad_step is None and not r.rejections
    assert [(f.what, f.step) for f in search(r, "b")] == [
        ("looked up", 4), ("admitted", 5), ("finished", 6)]
    assert len(search(r, "")) == 0 and len(search(r, "a")) == 3
    assert r.requests_done(4) == 1 and r.requests_done(7) == 2
    assert r.stats["tree"]["hit_tokens"] == 2 and r.matches == {"a": 0, "b": 2}


def test_index_tells_empty_steps_by_their_place():
    """A 4-slot pool, page 1. a [1,2,3] is looked up (PrefixMatched 0), locked at the root (a
    step with no event) and finished (leaf #1, 3 slots). b [9] has an empty key (1-token prompt
    minus its last): its lookup and its lock hold no event at all; finished (leaf #2, 1 slot:
    "1 token", not "1 tokens", #24 item 10).
    c [5..9] needs 5 slots: evict takes both leaves (step 9), 4 < 5, so it is rejected by an
    unlock at the root, again a step with no event. The index tells each from its place in the
    request's flow and its typed events, not from the op's name."""
    data = _lines([{"rid": "a", "arrival": 0, "tokens": [1, 2, 3], "output_len": 1},
                   {"rid": "b", "arrival": 1, "tokens": [9], "output_len": 1},
                   {"rid": "c", "arrival": 2, "tokens": [5, 6, 7, 8, 9], "output_len": 1}])
    r = replay(data, "three.jsonl", 4, budget=BIG)
    assert [(f.what, f.step) for f in r.index["b"]] == [
        ("looked up", 4), ("admitted", 5), ("finished", 6), ("evicted (leaf #2, 1 token)", 9)]
    assert [(f.what, f.step) for f in r.index["c"]] == [
        ("looked up", 7), ("admitted", 8), ("rejected", 10)]
    assert r.index["a"][-1] == ("evicted (leaf #1, 3 tokens)", 9)
    assert r.matches == {"a": 0, "c": 0} and r.ends == [3, 6, 10]
    assert [x.rid for x in r.rejections if x.cache == "radix tree"] == ["c"]


def test_replay_lists_rejections_with_the_reason():
    """The eviction question at 2,000 tokens: the 2,624-token RAG request cannot fit either
    cache; both say so with the figures."""
    data = (TRACES / "eviction_question.jsonl.gz").read_bytes()
    r = replay(data, "q.jsonl.gz", 2_000, budget=BIG)
    caches = {x.cache for x in r.rejections if x.rid == "rag-0"}
    assert caches == {"radix tree", "block cache"}
    why = next(x.reason for x in r.rejections if x.cache == "block cache")
    assert "needs 164 blocks of 16; the pool has 125" in why


def test_failing_op_log_keeps_the_last_good_step():
    """insert, lock node 1, unlock it twice: the second unlock breaks lock_ref's rule; the
    replay keeps the 4 good steps (the cache's reset, insert, lock, unlock) and names line 4
    and the rule."""
    data = _lines([{"op": "insert", "tokens": [1, 2, 3]}, {"op": "lock", "node": 1},
                   {"op": "unlock", "node": 1}, {"op": "unlock", "node": 1}])
    r = replay(data, "ops.jsonl", budget=BIG)
    f = r.failure
    assert (f.line, f.op, f.last_good_step) == (4, "unlock", 4) and r.log.num_steps == 4
    assert "holds no lock" in f.error and "never goes below 0" in f.rule
    assert r.op_counts == {"insert": 1, "lock": 1, "unlock": 2}


def test_budget_refuses_with_the_figures_and_releases():
    """A 1 MiB session budget: a replay that needs more stops with the figures and holds
    nothing afterwards; release frees what a session held."""
    b = Budget(2**20, 2**22)
    b.reserve("s", "a", 600_000)
    with pytest.raises(BudgetError, match=r"needs 0\.6 MiB; this session may hold 1\.0 MiB"):
        b.reserve("s", "b", 600_000)
    b.release("s")
    assert b.usage("s").session == 0
    data = (TRACES / "mooncake_excerpt.jsonl").read_bytes()
    with pytest.raises(BudgetError):
        replay(data, "m.jsonl", 1_000_000, session_id="s", budget=b)
    assert b.usage("s").session == 0


def test_budget_refuses_the_block_keyframes_before_either_cache_runs(monkeypatch):
    """The block keyframes at their most (BlockFrames.max_nbytes: 8 frames of 62,501 blocks
    for the excerpt's 200 requests at 1 M tokens, ~30 MB) are held before any cache runs: a
    session budget with room for the tree's lists (72 MB) but not for them too refuses the
    upload without running the tree, and holds nothing afterwards."""
    data = (TRACES / "mooncake_excerpt.jsonl").read_bytes()
    monkeypatch.setattr(trace_run, "run_tree", lambda *a, **k: pytest.fail("the tree ran"))
    b = Budget(90 * 2**20, 2**30)
    with pytest.raises(BudgetError, match="this session may hold 90.0 MiB"):
        replay(data, "m.jsonl", 1_000_000, session_id="s", budget=b)
    assert b.usage("s").session == 0


def test_bad_trace_is_one_line():
    with pytest.raises(TraceError, match="line 1"):
        replay(b'{"rid": 1}\n', "bad.jsonl", budget=BIG)


def test_job_pool_places_cancels_and_refuses():
    """One worker: the first job runs, the next two wait in places 1 and 2; cancelling the
    first waiting one drops it and moves the other up; past max_queued a submit is refused."""
    pool = JobPool(workers=1, max_queued=2)
    gate, started = threading.Event(), threading.Event()
    running = pool.submit("a", lambda progress, cancel: started.set() or gate.wait(5) and "A")
    assert started.wait(5)
    b = pool.submit("b", lambda progress, cancel: "B")
    c = pool.submit("c", lambda progress, cancel: (progress(0.5, "half"), "C")[1])
    assert (b.place(), c.place()) == (1, 2)
    with pytest.raises(QueueFull, match="2 jobs are waiting"):
        pool.submit("d", lambda progress, cancel: None)
    b.cancel()
    assert b.state == "cancelled" and c.place() == 1
    gate.set()
    assert running.wait(5) and c.wait(5)
    assert (running.result(), c.result(), c.fraction) == ("A", "C", 0.5)


@settings(max_examples=1, deadline=None)
@given(st.just(None))
def test_cancel_stops_a_running_replay(_):
    """A running replay sees its cancel event at its next request and stops."""
    pool = JobPool(workers=1)
    data = (TRACES / "mooncake_excerpt.jsonl").read_bytes()
    job = pool.submit("m", lambda progress, cancel: replay(
        data, "m.jsonl", budget=BIG, progress=lambda f, t: cancel.set(), cancel=cancel))
    assert job.wait(60) and job.state == "cancelled"


def test_replay_with_vllm_hashes_same_hits_vllm_hashes_in_the_pool():
    """Hashing does not change hits: three_requests replays to the same block stats with
    radixlens and vllm-sha256 hashes; with vLLM's, the pool after request 1 (a restored
    keyframe, then again after a scrub) carries vLLM's hash of R1's first block."""
    from radix.blocks.hashing import hash_request_tokens, hash_to_int64

    data = (TRACES / "three_requests.jsonl.gz").read_bytes()
    fast = replay(data, "t", budget=BIG)
    vllm = replay(data, "t", budget=BIG, hash_algo="vllm-sha256")
    assert vllm.stats["blocks"] == fast.stats["blocks"]
    first = vllm.trace.requests[0].token_ids
    want = hash_to_int64(hash_request_tokens(first, 16, hash_algo="vllm-sha256")[0])
    for n in (1, 3, 1):
        hashes = {b.hash for b in vllm.blocks.at(n).snapshot.blocks}
        assert want in hashes
        assert want not in {b.hash for b in fast.blocks.at(n).snapshot.blocks}


def test_big_request_traces_check_invariants_on_a_stride(monkeypatch):
    """Past CHECK_EVERY_REQUEST_UP_TO requests the full check runs every ceil(n / CHECKS_PER_
    TRACE) requests and after the last (it walks the whole tree); 10 requests with the limits at
    4 and 3 checks: every 4th, so after requests 4, 8 and 10. A check that fails is reported."""
    import scenarios.trace as trace_mod
    monkeypatch.setattr(trace_mod, "CHECK_EVERY_REQUEST_UP_TO", 4)
    monkeypatch.setattr(trace_mod, "CHECKS_PER_TRACE", 3)
    data = "".join(json.dumps({"rid": f"r{i}", "tokens": [1, 2, 3, 10 + i], "output_len": 2})
                   + "\n" for i in range(10)).encode()
    calls = []
    real = RadixCache.check_invariants
    monkeypatch.setattr(RadixCache, "check_invariants",
                        lambda self: (calls.append(self.total_size()), real(self))[1])
    r = replay(data, "t.jsonl")
    assert r.checked_every == 4 and len(calls) == 3 and r.first_bad_step is None
    # past the same limit the log keeps a keyframe every LONG_KEYFRAME_EVERY steps, not 64; the
    # tree at every step is the same as with dense keyframes
    assert r.log.keyframe_every == trace_mod.LONG_KEYFRAME_EVERY
    monkeypatch.setattr(trace_mod, "CHECK_EVERY_REQUEST_UP_TO", 10)
    dense = replay(data, "t.jsonl")
    assert dense.log.keyframe_every == 64
    assert all(r.log.snapshot_at(k) == dense.log.snapshot_at(k)
               for k in range(r.log.num_steps + 1))

    def broken(self):
        raise trace_mod.InvariantError("lock_ref below zero at node 3")
    monkeypatch.setattr(RadixCache, "check_invariants", broken)
    r = replay(data, "t.jsonl")
    assert r.first_bad_step is not None and "lock_ref below zero" in r.violation
