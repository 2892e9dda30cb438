"""The deferred decode ledger (radix/sched/ledger.py) against the one-step loop.

With a run allocator and a priced runner the scheduler counts decode steps in aggregate and
settles rows only when read; every figure must still be the one-step loop's: rows, totals, the
tree (all but slot ids), the block shadow's queue and counts, the new-token ratio. The cases
that broke a first version are here on purpose: two identical prompts whose rows end on the
same slot (the first in the batch continues the run, the second opens a fresh one), and a
newcomer whose prefix ends where a running row's run ends, admitted before that row decodes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.runs.sim import SimConfig, build, run
from radix.sched.ledger import DecodeLedger, hits, hits_sum
from radix.tokens import TokenRuns
from radix.traces import Trace, TraceRequest
from tests.radix.sched.test_sim_fastforward import assert_same, run_both


def compact_trace(prompts: list[list[tuple[int, int]]], outputs: list[int],
                  gaps: list[float]) -> Trace:
    reqs, t = [], 0.0
    for i, (spans, out, gap) in enumerate(zip(prompts, outputs, gaps, strict=True)):
        t += gap
        reqs.append(TraceRequest(f"r{i}", t, TokenRuns(spans), out))
    return Trace("mooncake", reqs)


def ledger_steps(trace: Trace, **cfg) -> int:
    """Decode steps the ledger counted in a fast-forwarded run (0: it never ran)."""
    sim = build(trace, SimConfig(**cfg))
    run(sim)
    return sim.sched.ledger.now if sim.sched.ledger is not None else 0


# prompts drawn from a small pool of pieces, so that requests repeat each other exactly, extend
# each other's prompts (multi-turn) and share only a head
piece = st.sampled_from([(0, 24), (1000, 7), (2000, 16), (3000, 33), (4000, 1)])
prompt = st.lists(piece, min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(prompt, st.integers(1, 120), st.sampled_from([0.0, 0.0, 0.01, 0.2])),
                min_size=2, max_size=12),
       st.sampled_from([None, 300, 800]), st.sampled_from([1, 4, 16]),
       st.sampled_from([None, 32]), st.sampled_from([4, 16]), st.sampled_from(["lpm", "fcfs"]))
def test_the_ledger_equals_the_one_step_loop(reqs, capacity, page, chunk, block, policy):
    prompts = [[(a + 100_000 * k, n) for k, (a, n) in enumerate(p)] for p, _, _ in reqs]
    trace = compact_trace(prompts, [o for _, o, _ in reqs], [g for _, _, g in reqs])
    if chunk is not None and chunk < page:
        chunk = page
    fast, slow = run_both(trace, capacity=capacity, page_size=page, block_size=block,
                          chunked_prefill_size=chunk, policy=policy, max_prefill_tokens=96)
    assert_same(fast, slow)


def test_identical_prompts_share_a_row_end_and_the_second_opens_a_fresh_run():
    """Two identical 30-token prompts arrive together, page 4: both are prefilled in one batch,
    the second's insert finds the first's tokens, so its row is pointed at the first's slots
    and ends on the same slot. Step by step, the first continues that run and the second gets
    a fresh page-aligned run; the ledger must count pages the same way (30 % 4 = 2: the first
    fills its last page, the second opens a page at its first token)."""
    trace = compact_trace([[(0, 30)], [(0, 30)]], [40, 40], [0.0, 0.0])
    fast, slow = run_both(trace, page_size=4)
    assert_same(fast, slow)
    assert ledger_steps(trace, page_size=4) > 0


def test_a_newcomer_continuing_a_running_rows_run():
    """r1's prompt (30 tokens) is checkpointed after its prefill; r2 (r1's prompt + 10) comes
    before r1 decodes, matches r1's whole prompt and would continue r1's run in place; the
    ledger settles r1 first, and r1 then opens a fresh run, as step by step."""
    trace = compact_trace([[(0, 30)], [(0, 30), (500, 10)]], [50, 50], [0.0, 0.0])
    for budget in (30, 64):  # r2 in the next prefill batch, or in the same one
        fast, slow = run_both(trace, page_size=4, max_prefill_tokens=budget)
        assert_same(fast, slow)


def test_the_ledger_runs_only_where_it_is_exact():
    """Compact traces with a priced runner get it; plain requests (a free-list allocator, slot
    ids that a picture shows) and the one-step loop do not."""
    compact = compact_trace([[(0, 30)], [(0, 30), (500, 10)]], [50, 50], [0.0, 0.1])
    plain = Trace("request", [TraceRequest("a", 0.0, tuple(range(30)), 50)])
    assert ledger_steps(compact) > 0
    assert ledger_steps(compact, fast_forward=False) == 0
    assert build(plain).sched.ledger is None
    assert isinstance(build(compact).sched.ledger, DecodeLedger)


def test_reserved_outputs_is_admissions_sum():
    """The ledger's running sum of min(max_new_tokens - outputs, 4,096) is the sum PrefillAdder
    would take over the batch, as requests join, decode past the clip and finish."""
    trace = compact_trace([[(0, 30)], [(100, 20)], [(200, 10)]], [5000, 300, 4100],
                          [0.0, 0.0, 0.0])
    sim = build(trace)
    sched, ledger = sim.sched, sim.sched.ledger
    for r in sim.reqs:
        sched.add_request(r)
    checked = 0
    while sched.has_work:
        sched.step(until=sim.clock.now + 0.05)  # short spans: many checks
        if ledger.entries:
            expect = sum(min(e.req.max_new_tokens - len(e.req.output_ids)
                             - (ledger.now - e.g0), 4096) for e in ledger.entries.values())
            assert ledger.reserved_outputs() == expect
            checked += 1
    assert checked > 10


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(prompt, st.integers(1, 120), st.sampled_from([0.0, 0.01, 0.2])),
                min_size=2, max_size=10),
       st.sampled_from([None, 300, 800]), st.sampled_from([1, 16]))
def test_the_explainer_gives_the_same_answers_with_the_ledger(reqs, capacity, page):
    """The explainer's run (compute hooks, eviction marks) with deferred decode: every bucket,
    every request's step and time, the tree's eviction named the same; a block eviction by a
    decode step names the same step and time (its token count is that step's for all requests
    together, where the one-by-one path counted each request's own)."""
    from radix.runs.explain import explain
    from radix.sched import scheduler as sched_mod
    prompts = [[(a + 100_000 * k, n) for k, (a, n) in enumerate(p)] for p, _, _ in reqs]
    trace = compact_trace(prompts, [o for _, o, _ in reqs], [g for _, _, g in reqs])
    cfg = SimConfig(capacity=capacity, page_size=page, block_size=16, max_prefill_tokens=96)

    def plain(e):
        out = e.to_json()
        for r in out["requests"] + [r for rows in out["top_losers"].values() for r in rows]:
            if r["blocks_evicted_by"]:
                r["blocks_evicted_by"].pop("tokens")
        return out
    with_ledger = plain(explain(trace, cfg, what_if=False))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sched_mod, "DecodeLedger", lambda sched: None)
        without = plain(explain(trace, cfg, what_if=False))
    assert with_ledger == without


def test_hits_summed_by_laps_equal_the_sum_per_residue():
    """pages_needed / blocks_needed count a histogram's hits by whole laps of the modulus and
    the remainder, as the per-residue sum does (seeded cases: moduli 1..70, any start)."""
    rng = random.Random(27)
    for _ in range(500):
        hist = [rng.randint(0, 9) for _ in range(rng.choice([1, 2, 3, 16, 64, rng.randint(1, 70)]))]
        start, steps, m = rng.randint(0, 10_000), rng.randint(0, 300), len(hist)
        assert hits_sum(hist, start, steps) == sum(h * hits(r, start, steps, m)
                                                   for r, h in enumerate(hist)), (hist, start)
