"""The scheduler loop: the cold burst, chunked prefill, hits during decode, retraction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.events import (
    AdmissionStopped,
    ListSink,
    QueueSorted,
    RequestAdmitted,
    RequestRetracted,
)
from radix.request import Req, SlotAllocator
from radix.runs.costs import CostModel
from radix.runs.sim import SimClock, SimRunner
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

PREFIX = list(range(1, 2001))  # the cold 2,000-token shared prefix


def burst(n=64, suffix=16, out=4):
    return [Req(f"r{i:02d}", PREFIX + [10_000 + i * suffix + j for j in range(suffix)],
                max_new_tokens=out) for i in range(n)]


def make(capacity=1_000_000, page_size=1, **cfg):
    alloc = SlotAllocator(capacity)
    tree = RadixCache(page_size=page_size, allocator=alloc)
    clock = SimClock()
    sink = ListSink()
    sched = Scheduler(SimRunner(CostModel(), clock), tree, alloc, SchedulerConfig(**cfg),
                      clock=clock, sink=sink)
    return sched, tree, alloc, sink


def run(sched, reqs):
    for r in reqs:
        sched.add_request(r)
    reports = sched.run_to_completion()
    return reports


def prefix_prefilled(reqs):
    """Tokens of the shared prefix that were computed (prefilled) rather than reused."""
    return sum(len(PREFIX) - min(r.metrics["matched_tokens"], len(PREFIX)) for r in reqs)


def check_accounting(sched, tree, alloc):
    """Every used slot is the tree's or one running request's own (past its protected part)."""
    tree.check_invariants()
    alloc.check_invariants()
    live = list(sched.running) + ([sched.chunked_req] if sched.chunked_req else [])
    own = sum(len(r.slot_ids) - r.cache_protected_len for r in live)
    assert alloc.num_used == tree.total_size() + own


def test_cold_burst_without_budget_prefills_the_prefix_64_times():
    """No budget (max_prefill_tokens larger than the burst), FCFS: all 64 are admitted in round
    one, nothing is cached yet, so the prefix is prefilled 64 x 2,000 = 128,000 times
    (129,024 with the 64 x 16 suffix tokens)."""
    reqs = burst()
    sched, tree, alloc, _ = make(policy="fcfs", max_prefill_tokens=10**9)
    reports = run(sched, reqs)
    assert len(reports[0].rids) == 64
    assert prefix_prefilled(reqs) == 128_000
    assert sum(r.metrics["prefilled_tokens"] for r in reqs) == 129_024
    check_accounting(sched, tree, alloc)


def test_cold_burst_one_request_per_round_prefills_the_prefix_once():
    """Budget 2,016 = one request: round one prefills r00 (the first request is always admitted)
    and inserts its prompt; then the other 63 match 2,000 tokens and prefill 16 each:
    2,016 + 63 x 16 = 3,024 tokens, the prefix once. With LPM the result is the same."""
    for policy in ("fcfs", "lpm"):
        reqs = burst()
        sched, tree, alloc, _ = make(policy=policy, max_prefill_tokens=2016)
        reports = run(sched, reqs)
        assert reports[0].rids == ["r00"]
        assert prefix_prefilled(reqs) == 2_000
        assert sum(r.metrics["matched_tokens"] == 2000 for r in reqs) == 63
        assert sum(r.metrics["prefilled_tokens"] for r in reqs) == 3_024
        check_accounting(sched, tree, alloc)


def test_cold_burst_default_budget_still_prefills_duplicates():
    """SGLang's default budget, 16,384, LPM. Round one: every request matches 0 cached tokens
    (<= 32), so each is checked against the waiting-queue tree: r00 goes in, r01..r63 share 2,000
    >= 32 tokens with it and are deprioritized - which only reorders (r00 first, the rest keep
    their order). Admission then charges 2,016 per request against rem_input_tokens:
    16,384 -> 14,368 -> 12,352 -> 10,336 -> 8,320 -> 6,304 -> 4,288 -> 2,272 -> 256 after r07;
    r08 needs 2,016 >= 256 and stops the round. So 8 requests prefill the prefix (7 duplicates,
    16,000 prefix tokens); r08..r63 (56) hit 2,000 next round and prefill 16 each:
    8 x 2,016 + 56 x 16 = 17,024 tokens in all."""
    reqs = burst()
    sched, tree, alloc, sink = make(policy="lpm", max_prefill_tokens=16384)
    reports = run(sched, reqs)
    assert reports[0].rids == [f"r{i:02d}" for i in range(8)]
    assert [e.rem_input_tokens for e in sink.events if isinstance(e, RequestAdmitted)][:8] == [
        14368, 12352, 10336, 8320, 6304, 4288, 2272, 256]
    assert prefix_prefilled(reqs) == 16_000
    assert sum(r.metrics["prefilled_tokens"] for r in reqs) == 17_024
    assert reports[1].kind == "prefill" and len(reports[1].rids) == 56
    check_accounting(sched, tree, alloc)


def test_chunked_prefill_goes_through_cache_unfinished_req():
    """A 5,000-token prompt with chunked_prefill_size 2,048: chunks of 2,048, 2,048 and 904.
    Between chunks the computed part is in the tree and locked for the request; a request with
    the same first 3,000 tokens arriving after the second chunk matches 3,000 (capped at
    4,096 computed)."""
    long = Req("long", list(range(5000)), max_new_tokens=2)
    sched, tree, alloc, _ = make(chunked_prefill_size=2048)
    sched.add_request(long)
    first = sched.step()
    assert first.extend_lens == [2048] and sched.chunked_req is long
    assert tree.protected_size() == 2048 and long.cache_protected_len == 2048
    second = sched.step()
    assert second.extend_lens == [2048] and tree.protected_size() == 4096
    check_accounting(sched, tree, alloc)
    follower = Req("follower", list(range(3000)) + [99_999] * 10, max_new_tokens=1)
    sched.add_request(follower)
    reports = sched.run_to_completion()
    assert reports[0].rids == ["long", "follower"] and reports[0].extend_lens == [904, 10]
    assert long.metrics["prefilled_tokens"] == 5000 and follower.metrics["matched_tokens"] == 3000
    check_accounting(sched, tree, alloc)


def test_prompt_is_cached_right_after_prefill_so_arrivals_during_decode_hit():
    """R1 (3,000 tokens, 50 output tokens) is prefilled; its prompt is inserted at once
    (cache_unfinished_req). R2 arrives while R1 decodes and matches all 3,000."""
    r1 = Req("r1", list(range(3000)), max_new_tokens=50)
    sched, tree, alloc, _ = make()
    sched.add_request(r1)
    sched.step()
    for _ in range(5):
        assert sched.step().kind == "decode"
    r2 = Req("r2", list(range(3000)) + [7, 7], max_new_tokens=3)
    sched.add_request(r2)
    assert sched.step().kind == "prefill"
    assert r2.metrics["matched_tokens"] == 3000 and r2.metrics["prefilled_tokens"] == 2
    sched.run_to_completion()
    check_accounting(sched, tree, alloc)


def test_retraction_keeps_the_tree_consistent_and_every_request_completes():
    """A pool of 400 slots, six 80-token prompts wanting 5 and 60 outputs in turn: a failed
    admission sets batch_is_full; each 5-output request that finishes clears it, and admission
    resumes on the estimate (0.7 of what the running requests may still generate), which
    over-admits: decode runs out of slots, requests are retracted (their decode suffix freed,
    not inserted), re-prefilled later, and all complete with their full output. (Four
    60-output prompts, which SGLang admits two at a time with nothing leaving early, never
    retract once batch_is_full is modelled.)"""
    reqs = [Req(f"q{i}", [i * 1000 + j for j in range(80)], max_new_tokens=60 if i % 2 else 5)
            for i in range(6)]
    sched, tree, alloc, sink = make(capacity=400, max_prefill_tokens=10**6)
    for r in reqs:
        sched.add_request(r)
    while sched.has_work:
        sched.step()
        check_accounting(sched, tree, alloc)
    retracted = [e for e in sink.events if isinstance(e, RequestRetracted)]
    assert retracted and sched.num_retracted == len(retracted)
    assert all(len(r.output_ids) == r.max_new_tokens for r in reqs)
    assert sum(r.metrics.get("retractions", 0) for r in reqs) == len(retracted)
    assert alloc.num_used == tree.total_size()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40), st.integers(1, 12)),
                min_size=1, max_size=12),
       st.integers(120, 400), st.sampled_from(["lpm", "fcfs", "dfs-weight", "lof"]),
       st.sampled_from([None, 16, 64]), st.sampled_from([1, 4]))
def test_random_workloads_complete_with_consistent_accounting(spec, capacity, policy, chunk,
                                                              page_size):
    """Random requests over 4 shared stems, tight pools, every policy, chunking on/off, page
    sizes 1 and 4: after every step the tree's invariants hold and every used slot belongs to
    the tree or to one running request; at the end all requests have their outputs and every
    used slot is the tree's."""
    stems = [[s * 100 + j for j in range(30)] for s in range(4)]
    reqs = [Req(f"p{i}", stems[s] + [5000 + i * 50 + j for j in range(n)], max_new_tokens=out)
            for i, (s, n, out) in enumerate(spec)]
    sched, tree, alloc, _ = make(capacity=capacity, page_size=page_size, policy=policy,
                                 chunked_prefill_size=chunk, max_prefill_tokens=96)
    for r in reqs:
        sched.add_request(r)
    steps = 0
    while sched.has_work:
        sched.step()
        steps += 1
        assert steps < 5000
        check_accounting(sched, tree, alloc)
    assert all(len(r.output_ids) == r.max_new_tokens for r in reqs)
    assert alloc.num_used == tree.total_size()


def test_a_request_too_big_for_the_pool_is_refused_at_add_request():
    """Pool of 23 slots, 20-token prompt, 2 new tokens: 20 + 2 + 1 page = 23 >= 23 can never be
    admitted (PrefillAdder's strict check), so add_request says so instead of queueing it."""
    sched, *_ = make(capacity=23)
    with pytest.raises(ValueError, match="request big: 20 prompt .* more than 23 slots"):
        sched.add_request(Req("big", list(range(1, 21)), max_new_tokens=2))
    assert not sched.has_work


def test_a_stalled_queue_raises_instead_of_idling_forever():
    """30 slots; a 10-token sequence sits in the tree locked by someone outside the scheduler,
    so free + evictable = 20 and a 20 + 2 + 1 = 23-slot request fits the pool (23 < 30) but can
    never be admitted while nothing runs: step() raises with the admission's reason."""
    sched, tree, alloc, _ = make(capacity=30)
    held = tree.insert(RadixKey(list(range(500, 510))), alloc.alloc(10)).last_node
    tree.inc_lock_ref(held)
    sched.add_request(Req("r", list(range(1, 21)), max_new_tokens=2))
    with pytest.raises(RuntimeError, match="stalled.*r: needs 23"):
        sched.run_to_completion(max_steps=50)


def test_chunked_prefill_with_the_cache_disabled_continues_where_it_stopped():
    """Cache off (SGLang's ChunkCache), chunks of 512, a 2,016-token prompt: the chunks are
    512, 512, 512, 480 (sum 2,016) and the request completes; it used to restart the prompt at
    every chunk (its computed slots were not kept as its prefix) until the pool ran out."""
    alloc = SlotAllocator(4_096)
    tree = RadixCache(allocator=alloc, disable=True)
    clock = SimClock()
    sched = Scheduler(SimRunner(CostModel(), clock), tree, alloc,
                      SchedulerConfig(chunked_prefill_size=512), clock=clock)
    (req,) = burst(n=1)
    reports = run(sched, [req])
    assert [r.extend_lens[0] for r in reports if r.kind == "prefill"] == [512, 512, 512, 480]
    assert req.metrics["prefilled_tokens"] == 2_016 and len(req.output_ids) == 4
    assert alloc.available_size() == 4_096


def _flag_run(b_new_tokens):
    """Two requests in a 100-slot pool under lpm; (steps of each prefill, steps, sorts)."""
    a = Req("a", list(range(20)), max_new_tokens=10)
    b = Req("b", list(range(100, 140)), max_new_tokens=b_new_tokens)
    sched, _tree, _alloc, sink = make(capacity=100, policy="lpm")
    sched.add_request(a)
    sched.add_request(b)
    reports = sched.run_to_completion()
    prefills = [(i + 1, r.rids) for i, r in enumerate(reports) if r.kind == "prefill"]
    return prefills, len(reports), sum(isinstance(e, QueueSorted) for e in sink.events)


def test_batch_is_full_holds_admission_until_a_request_leaves():
    """SGLang 0.5.23 sets running_batch.batch_is_full when add_one_req stops on NO_TOKEN with a
    request admitted, and skips get_new_batch_prefill until one leaves the batch.
    Pool 100, page 1. Step 1: a needs 20 + 10 + 1 = 31 < 100, admitted (budget offset 31,
    left 69); b needs 40 + 30 + 1 = 71 >= 69: NO_TOKEN, flag set. Step 2 would admit b without
    the flag: 80 free (a holds 20 slots) - 0.7 x 9 (a's outputs still to come) = 73.7 > 71.
    With it, a decodes its 9 remaining tokens (steps 2-10) alone; its finish clears the flag
    and b is prefilled at step 11, then decodes 29 more: 40 steps, not 31."""
    prefills, steps, _ = _flag_run(30)
    assert prefills == [(1, ["a"]), (11, ["b"])]
    assert steps == 40


def test_batch_is_full_skips_the_policy_sort_while_set():
    """b with 50 new tokens needs 40 + 50 + 1 = 91, more than the pool ever offers while a runs
    (80 free at most, minus a's estimate), so b is admitted at step 11 either way; but SGLang
    sorts the queue (lpm matches every waiting prompt) only when admission is tried: at step 1
    and step 11, 2 sorts, not one per step (11) as before the flag was modelled."""
    prefills, steps, sorts = _flag_run(50)
    assert prefills == [(1, ["a"]), (11, ["b"])]
    assert (steps, sorts) == (60, 2)


def test_a_spent_chunk_budget_stops_the_scan_before_matching():
    """SGLang 0.5.23's admission loop breaks at its top when budget_state() is OTHER ("a spent
    pass budget admits no one, even before the first candidate"), before matching the next
    request (found by tools/diff_sglang_batch_full.py). Chunks of 16: a's 48-token prompt goes
    16, 16, 16; its last chunk (step 3) is not truncated but leaves 16 - 16 = 0 chunk tokens,
    so b is not even looked at (no AdmissionStopped for b, no flag) and joins at step 4."""
    a = Req("a", list(range(48)), max_new_tokens=2)
    b = Req("b", list(range(100, 110)), max_new_tokens=2)
    sched, _tree, _alloc, sink = make(chunked_prefill_size=16)
    sched.add_request(a)
    sched.add_request(b)
    reports = [sched.step() for _ in range(4)]
    assert [(r.rids, r.extend_lens) for r in reports] == [
        (["a"], [16]), (["a"], [16]), (["a"], [16]), (["b"], [10])]
    assert not [e for e in sink.events if isinstance(e, AdmissionStopped)]
    assert not sched.batch_is_full


def test_max_running_requests_sets_batch_is_full_before_the_sort():
    """max_running_requests 1: at step 1 a is admitted and the scan reaches b with 0 running +
    1 admitted >= 1 rows (SGLang: len(can_run_list) >= get_num_allocatable_reqs), so the flag
    is set. Steps 2-5 decode a's 4 remaining tokens without sorting the queue; a's finish at
    step 5 clears the flag and b is sorted and admitted at step 6: 2 sorts (6 without the
    flag, one per step)."""
    a = Req("a", list(range(10)), max_new_tokens=5)
    b = Req("b", list(range(100, 110)), max_new_tokens=2)
    sched, _tree, _alloc, sink = make(policy="lpm", max_running_requests=1)
    sched.add_request(a)
    sched.add_request(b)
    reports = sched.run_to_completion()
    assert [(r.kind, r.rids) for r in reports[:6]] == [
        ("prefill", ["a"])] + [("decode", ["a"])] * 4 + [("prefill", ["b"])]
    assert sum(isinstance(e, QueueSorted) for e in sink.events) == 2
