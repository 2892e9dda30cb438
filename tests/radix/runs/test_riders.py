"""Block caches riding on one simulator run (radix/runs/riders.py): the totals an unbounded run
with blocks of B gives, to the last figure, whether run on its own or riding on the run with
blocks of 16; and the explainer's what-ifs take one simulator run fewer for it."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

import radix.runs.explain as rex
from radix.runs.riders import run_with_riders
from radix.runs.sim import SimConfig, build, run
from radix.sched.scheduler import Scheduler
from radix.traces import Trace, TraceRequest, load_trace

TRACES = Path(__file__).resolve().parents[3] / "examples" / "traces"


def chat() -> Trace:
    """Three users, three turns each, a 40-token system prompt shared by all; each turn's
    prompt is the last one plus 23 tokens; arrivals 0.01 s apart so requests overlap."""
    reqs, ctx = [], {u: list(range(40)) for u in range(3)}
    for k, (turn, u) in enumerate(itertools.product(range(3), range(3))):
        ctx[u] += [1000 * (u + 1) + 30 * turn + j for j in range(23)]
        reqs.append(TraceRequest(f"u{u}t{turn}", 0.01 * k, tuple(ctx[u]), 5 + k))
    return Trace("request", reqs)


def excerpt() -> Trace:
    t = load_trace(TRACES / "mooncake_excerpt.jsonl")
    return Trace(t.format, t.requests[:60], input_lens=t.input_lens[:60])


@pytest.mark.parametrize("make", [chat, excerpt], ids=["request", "mooncake"])
@pytest.mark.parametrize("policy", ["fcfs", "lpm"])
def test_a_rider_gives_what_its_own_run_gives(make, policy):
    trace = make()
    base = SimConfig(policy=policy)
    own, riding = run_with_riders(trace, base, [1, 64])
    assert own == run(build(trace, base)).totals
    for size, got in zip([1, 64], riding, strict=True):
        alone = run(build(trace, dataclasses.replace(base, block_size=size))).totals
        assert got == alone, size


def test_the_what_ifs_take_one_run_fewer(monkeypatch):
    """Unbounded base, 2 capacities: the what-ifs ask unbounded (the base), 2 capacities, pages
    1/16/64 (page 1 with blocks of 1) and namespaces (the base again): 6 configurations. Page 1
    with blocks of 1 rides on the base run: 5 simulator runs (before: 6), same figures."""
    trace = chat()
    runs = []
    real = Scheduler.__init__
    monkeypatch.setattr(Scheduler, "__init__", lambda self, *a, **k: runs.append(1) or real(
        self, *a, **k))
    got = rex.what_ifs(trace, SimConfig(policy="fcfs"), 200, capacities=2)
    assert len(runs) == 5
    page1 = got["page_size"][0]
    alone = run(build(trace, SimConfig(policy="fcfs", block_size=1))).totals
    assert page1["block_hit_rate"] == alone["block_matched_tokens"] / sum(
        len(r.token_ids) for r in trace.requests)
    assert page1["tree_hit_rate"] == got["capacity"][0]["tree_hit_rate"]
