"""The scheduler over SGLang's component tree (radix/sched/hybrid.py): one request at a time it
gives what radix/tree/hybrid_lifecycle.py's `serve` gives (the oracle, on random workloads);
admission holds requests to SGLang's SWA estimate; decode frees the window, retraction and the
Mamba state slots' cap on running requests work over every pool."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from radix.events import ListSink, RequestAdmitted
from radix.request import Req, SlotAllocator
from radix.runs.costs import CostModel
from radix.runs.sim import SimClock, SimRunner
from radix.sched.hybrid import HybridPrefillAdder, HybridSteps
from radix.sched.policy import request_key
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.tree import hybrid_lifecycle as life
from radix.tree.components.base import MAMBA, SWA
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator
from radix.tree.unified_radix_cache import UnifiedRadixCache

KINDS = {"swa": ("full", "swa"), "mamba": ("full", "mamba"), "nobuf": ("full", "mamba"),
         "hybrid": ("full", "swa", "mamba")}


class Counts:
    """Counts the tree's events by name (and cause): what a workload exercised."""

    def __init__(self) -> None:
        self.seen: Counter = Counter()

    def emit(self, e) -> None:
        name = type(e).__name__
        if name == "ComponentTombstoned":
            name = f"{e.component} tombstoned"
        elif name == "ComponentStored" and e.recovered:
            name = "swa recovered"
        self.seen[name] += 1


def _cache(kind: str, seed: int, page: int, policy: str, sink=None):
    """A tree over small pools (evictions), and a log of every slot freed, per pool in order."""
    rng = random.Random(seed)
    comps, swa = KINDS[kind], "swa" in KINDS[kind]
    size = rng.randrange(300, 500) // page * page
    alloc = (SWASlotAllocator(size, size * rng.choice([6, 8, 10]) // 10 // page * page, page)
             if swa else SlotAllocator(size, page_size=page))
    mamba = MambaSlotPool(rng.randrange(18, 30)) if "mamba" in comps else None
    freed: list = []
    pools = {"full": alloc.full, "swa": alloc.swa} if swa else {"full": alloc}
    if mamba is not None:
        pools["mamba"] = mamba
    for name, pool in pools.items():
        free = pool.free
        pool.free = lambda ids, f=free, n=name: (freed.append((n, tuple(ids))), f(ids))[1]
    cache = UnifiedRadixCache(
        comps, page_size=page, eviction_policy=policy,
        sliding_window_size=rng.choice([4, 8, 16]) * page if swa else None,
        mamba_chunk_size=rng.choice([4, 8]) * page,
        mamba_max_states_per_path=rng.choice([-1, -1, 1, 2]),
        enable_mamba_extra_buffer=kind != "nobuf", allocator=alloc, mamba_pool=mamba, sink=sink)
    knobs = life.SchedulerKnobs(
        mamba_track_interval=rng.choice([1, 2]) * page if page > 1 else rng.choice([4, 8, 16]),
        enable_overlap_schedule=kind != "nobuf", swa_eviction_interval=rng.choice([1, 2, 8]),
        release_prefill_swa=rng.random() < 0.5)
    return cache, knobs, freed


def _workload(seed: int, n: int) -> list[tuple]:
    """Three shared prefixes and own tails, or (one in four) a later turn of an earlier request
    (its prompt, its output, more); outputs of 1-29 tokens, a LoRA namespace now and then."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3) for _ in range(rng.randrange(80))] for _ in range(3)]
    out: list[tuple] = []
    for i in range(n):
        tail = [rng.randrange(3) for _ in range(rng.randrange(1, 40))]
        if out and rng.random() < 0.25:
            _, prompt, reply, extra, _ = rng.choice(out)
            prompt = prompt + reply + tail
        else:
            prompt, extra = rng.choice(prefixes) + tail, rng.choice([None, None, "lora"])
        out.append((f"r{i}", prompt, [rng.randrange(3) for _ in range(rng.randrange(1, 30))],
                    extra, rng.randrange(3)))
    return out


def _sched(cache, knobs=None, outputs=None, sink=None, **cfg) -> Scheduler:
    clock = SimClock()
    return Scheduler(SimRunner(CostModel(), clock, outputs), cache, cache.allocator,
                     SchedulerConfig(**cfg), clock=clock, knobs=knobs, sink=sink)


def _accounted(cache, running=()) -> None:
    """Every slot of every pool is free, the tree's, or a running request's own."""
    cache.check_invariants()
    a = cache.allocator
    own = sum(len(r.slot_ids) - r.cache_protected_len for r in running)
    full = (a.full if cache.is_swa_enabled else a)
    assert full.size - full.available_size() == cache.total_size() + own
    if cache.is_swa_enabled and not running:
        assert a.swa.num_used == (cache.component_evictable_size(SWA)
                                  + cache.component_protected_size(SWA))
    if cache.is_mamba_enabled and not running:
        pool = cache.mamba_pool
        assert pool.size - pool.available_size() == (cache.component_evictable_size(MAMBA)
                                                      + cache.component_protected_size(MAMBA))


def _side_by_side(kind: str, page: int, seed: int, policy: str, order: str,
                  chunk: int | None) -> tuple[Counter, int]:
    """One random workload through the Scheduler (schedule policy `order`) and through
    hybrid_lifecycle.serve, one request at a time, compared after each; returns what ours
    exercised and the tokens hit."""
    counts = Counts()
    ours, knobs, ours_freed = _cache(kind, seed, page, policy, counts)
    theirs, _, theirs_freed = _cache(kind, seed, page, policy)
    work = _workload(seed, 20)
    sched = _sched(ours, knobs, {w[0]: w[2] for w in work}, policy=order,
                   chunked_prefill_size=chunk)
    matched = 0
    for rid, prompt, out, extra, prio in work:
        a, b = (Req(rid, prompt, max_new_tokens=len(out), extra_key=extra, priority=prio)
                for _ in range(2))
        sched.add_request(a)
        sched.run_to_completion()
        if order == "lpm":
            theirs.match_prefix(request_key(b), rid=rid)
        tokens = iter(out)
        hit = life.serve(theirs, b, knobs, chunk, lambda r, t=tokens: next(t))
        where = f"{kind} page {page} seed {seed} {policy} chunk {chunk} {rid}"
        assert (a.metrics["matched_tokens"], a.output_ids) == (hit, out), where
        assert ours.snapshot() == theirs.snapshot(), where
        assert ours_freed == theirs_freed, where
        matched += hit
    _accounted(ours)
    return counts.seen, matched


@pytest.mark.parametrize("kind", KINDS)
def test_one_request_at_a_time_equals_the_lifecycle(kind):
    """Random workloads (small pools: eviction, tombstones, cascades, path caps; chunked
    prefill; Mamba copy-on-write and tracking; SWA window frees and the early lock release),
    one request at a time: the Scheduler over a UnifiedRadixCache and hybrid_lifecycle.serve
    give every request the same hit and outputs, and after each the same tree per component
    (slots, tombstones, locks) and the same slots freed, pool by pool, in order. LPM's sort
    matches each request's whole key first (as SGLang's calc_priority does), so the oracle
    matches it too; FCFS under priority eviction sorts without matching."""
    seen, matched = Counter(), 0
    for page in (1,) if kind == "nobuf" else (1, 4):
        for seed in range(2 if kind == "nobuf" else 1):
            for policy, order in (("lru", "lpm"), ("priority", "fcfs")):
                for chunk in (None, 16):
                    more, hit = _side_by_side(kind, page, seed, policy, order, chunk)
                    seen, matched = seen + more, matched + hit
    wanted = {"swa": ("SlidingWindowFreed", "swa tombstoned", "swa recovered"),
              "mamba": ("MambaStateCopied", "MambaStateTracked", "mamba tombstoned"),
              "nobuf": ("mamba tombstoned",),
              "hybrid": ("SlidingWindowFreed", "swa tombstoned", "MambaStateCopied",
                         "mamba tombstoned")}[kind]
    assert matched and all(seen[name] for name in wanted), seen


def test_mamba_known_answers_through_the_scheduler():
    """Qwen3.5's shape (GDN chunk 64, extra buffer): 1,600 shared + 600 own tokens, one output
    token each, one after another: 0, 0 (its match asks for a state at 1,600), then 1,600; the
    same figures as SGLang's own code (docs/HYBRID.md's known answers)."""
    cache = UnifiedRadixCache(("full", "mamba"), allocator=SlotAllocator(20_000),
                              mamba_pool=MambaSlotPool(40))
    sched, hits = _sched(cache), []
    for i in range(4):
        req = Req(f"r{i}", list(range(1600)) + [10_000 + i] * 600, max_new_tokens=1)
        sched.add_request(req)
        sched.run_to_completion()
        hits.append(req.metrics["matched_tokens"])
    assert hits == [0, 0, 1600, 1600]
    _accounted(cache)


def _swa_cache(size=200, size_swa=40, window=7):
    return UnifiedRadixCache(("full", "swa"), sliding_window_size=window,
                             allocator=SWASlotAllocator(size, size_swa))


def test_swa_admission_holds_each_request_to_its_window_estimate():
    """SWA pool 40, window 7: a 30-token prompt with 4 to decode reserves 23 + 7 + 1 = 31 SWA
    slots, leaving 9; a 10-token prompt then needs 3 + 7 + 1 = 11 >= 9 and waits (NO_TOKEN),
    though the full pool (200) has room for both."""
    cache = _swa_cache()
    steps = HybridSteps(cache)
    adder = HybridPrefillAdder(cache, cache.allocator, [])
    first, second = Req("a", list(range(30)), max_new_tokens=4), Req("b", [99] * 10,
                                                                       max_new_tokens=4)
    steps.match(cache, first)
    assert adder.add_one_req(first).value == "continue" and adder.remaining_swa == 9
    steps.match(cache, second)
    assert adder.add_one_req(second).value == "no_token"
    assert adder.stop_reason == "b: needs 11 SWA slots >= 9 free+evictable"
    assert adder.rem_total_tokens > 100


def test_a_prompt_the_swa_pool_never_holds_whole_is_chunked_to_fit():
    """A 50-token prompt with 4 to decode needs 43 + 7 + 1 = 51 SWA slots, more than the pool's
    40: with chunked prefill (64) its first chunk is cut to 40 - (4 + 1) = 35 tokens, the rest
    (15) follows; without chunking the scheduler refuses it up front."""
    sink = ListSink()
    sched = _sched(_swa_cache(), sink=sink, chunked_prefill_size=64)
    req = Req("long", list(range(50)), max_new_tokens=4)
    sched.add_request(req)
    sched.run_to_completion()
    admitted = [(e.extend_len, e.chunked) for e in sink.events if isinstance(e, RequestAdmitted)]
    assert admitted == [(35, True), (15, False)] and len(req.output_ids) == 4
    with pytest.raises(ValueError, match="need 51 SWA slots .* chunked prefill would cut it"):
        _sched(_swa_cache()).add_request(Req("long", list(range(50)), max_new_tokens=4))


def test_batched_decode_frees_windows_and_retracts_over_every_pool():
    """Six 80-token prompts wanting 5 and 60 outputs in turn, decoding together in FULL + SWA +
    MAMBA pools of 400 full slots (as test_scheduler.py's retraction test): admission trusts
    the estimate (0.7 of the outputs to come), decode runs out of full slots and retracts
    (nothing inserted, the Mamba slots given back), the window frees each one's passed SWA
    slots, every request still ends with all its tokens, and after every step every slot of
    every pool is free, the tree's, or a running request's own."""
    counts = Counts()
    cache = UnifiedRadixCache(("full", "swa", "mamba"), sliding_window_size=8,
                              mamba_chunk_size=8, allocator=SWASlotAllocator(400, 300),
                              mamba_pool=MambaSlotPool(60), sink=counts)
    sched = _sched(cache, life.SchedulerKnobs(swa_eviction_interval=1),
                   max_prefill_tokens=10**6)
    reqs = [Req(f"q{i}", [i * 1000 + j for j in range(80)], max_new_tokens=60 if i % 2 else 5)
            for i in range(6)]
    for r in reqs:
        sched.add_request(r)
    while sched.has_work:
        sched.step()
        _accounted(cache, sched.running)
    assert sched.num_retracted > 0 and counts.seen["SlidingWindowFreed"] > 0
    assert all(len(r.output_ids) == r.max_new_tokens for r in reqs)
    _accounted(cache)


def test_mamba_state_slots_cap_the_running_requests():
    """SGLang caps max_running_requests at the state slots over 3 + the tracking slots a
    request holds (2 with the overlap scheduler's ping-pong): 10 slots run 2 at a time, and a
    configured cap below it wins."""
    for cap, want in ((None, 2), (1, 1)):
        cache = UnifiedRadixCache(("full", "mamba"), allocator=SlotAllocator(5000),
                                  mamba_pool=MambaSlotPool(10))
        sched = _sched(cache, policy="fcfs", max_running_requests=cap)
        for i in range(5):
            sched.add_request(Req(f"r{i}", [i] * 20, max_new_tokens=5))
        widest = max(len(rep.rids) for rep in sched.run_to_completion() if rep.kind == "decode")
        assert sched.max_running_requests == want and widest == want
        _accounted(cache)
