"""scenarios/explain.py and viz/explain.py: the Trace debugger's explainer panel below the page:
the budget it holds, cancel, each bucket's requests and the replay step each one maps to."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from radix.runs.explain import BUCKETS
from radix.traces import load_trace
from runtime.budget import Budget, BudgetError
from scenarios.explain import (
    KEPT_PER_REQUEST,
    PLAIN_PER_WATCHED,
    WHAT,
    estimate,
    examples,
    run_explain,
    run_what_ifs,
    step_of,
    what_if_estimate,
)
from scenarios.trace import Cancelled, replay
from viz.explain import (
    bucket_figure,
    bucket_rows,
    capacity_figure,
    loser_rows,
    page_figure,
    prefix_rows,
)

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"
A = list(range(1, 41))
ROWS = [{"rid": "a", "arrival": 0, "tokens": A, "output_len": 2},
        {"rid": "b", "arrival": 9, "tokens": A, "output_len": 2},
        {"rid": "c", "arrival": 18, "tokens": list(range(100, 110)), "output_len": 1}]
DATA = "".join(json.dumps(r) + "\n" for r in ROWS).encode()


def test_buckets_examples_and_the_steps_they_link_to():
    """a and b share 40 tokens (b comes after a finished), c is its own. Tree: b hits 39, the
    last-token cap 1; first seen: a's 40 + c's 10. The hit bucket's example is b (39), whose
    lookup is log step 4 (reset, a's match, lock, finish): the tree after it is step 5; for
    the block cache, the tree after b's finish (log step 6): 7. The budget holds the kept
    result's bytes afterwards."""
    budget = Budget(2**30, 2**31)
    r = replay(DATA, "abc.jsonl", session_id="s", budget=budget)
    x = run_explain(r.trace, r.digest, r.capacity, session_id="s", budget=budget)
    e = x.explanation
    assert e.prompt_tokens == 90
    for side in ("tree", "blocks"):
        assert sum(e.totals[side].values()) == 90
    assert [(ex.rid, ex.tokens) for ex in x.examples["tree"]["hit"]] == [("b", 39)]
    assert [(ex.rid, ex.tokens) for ex in x.examples["tree"]["first_seen"]] == [
        ("a", 40), ("c", 10)]
    assert step_of(r, "b", "tree") == 5 and step_of(r, "b", "blocks") == 7
    assert step_of(r, "nobody", "tree") is None
    assert budget._held["s"][WHAT] == KEPT_PER_REQUEST * 3


def test_examples_are_the_largest_first_per_bucket():
    """A hand-made explanation: the examples of a bucket are its requests with tokens in it,
    the largest first, ties in trace order, at most `top`."""
    from types import SimpleNamespace as NS

    zero = dict.fromkeys(BUCKETS, 0)
    reqs = [NS(rid=f"r{i}", tree=zero | {"hit": n, "first_seen": 10 - n}) for i, n in
            enumerate([3, 0, 7, 3, 5])]
    e = NS(totals={"tree": {}}, requests=reqs)
    got = examples(e, top=3)["tree"]
    assert [x.rid for x in got["hit"]] == ["r2", "r4", "r0"]
    assert [x.rid for x in got["first_seen"]] == ["r1", "r0", "r3"]
    assert got["evicted"] == []


def test_refused_by_the_budget_and_cancelled_hold_nothing():
    """A budget smaller than the estimate refuses with the figures; a cancelled run stops at
    its first progress report and releases its reservation."""
    trace = load_trace(DATA)
    small = Budget(estimate(trace) - 1, 2**31)
    with pytest.raises(BudgetError, match="trace explain needs"):
        run_explain(trace, "d", 1_000_000, session_id="s", budget=small)
    assert small.usage("s").session == 0
    budget, stop = Budget(2**30, 2**31), threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        run_explain(trace, "d", 1_000_000, session_id="s", budget=budget, cancel=stop)
    assert budget.usage("s").session == 0


def test_what_ifs_fill_in_with_progress_and_figures_carry_units():
    """The what-ifs of the Mooncake excerpt: >= 8 capacities plus unbounded, page sizes 1, 16,
    64, namespaces on/off; progress only rises and ends at 1. The figures and tables draw."""
    trace = load_trace(TRACES / "mooncake_excerpt.jsonl")
    x = run_explain(trace, "d", 1_000_000, budget=Budget(2**30, 2**31))
    seen: list[float] = []
    run_what_ifs(trace, x, progress=lambda f, _t: seen.append(f))
    w = x.explanation.what_if
    assert len(w["capacity"]) >= 9 and [p["page_size"] for p in w["page_size"]] == [1, 16, 64]
    assert seen == sorted(seen) and 0 < seen[-1] <= 1
    fig = capacity_figure(w["capacity"], x.explanation.working_set)
    assert fig.layout.xaxis.type == "log" and len(fig.data) == 2
    # decades only: the digits between them came out at 10 px on a projector (#24)
    assert fig.layout.xaxis.dtick == 1
    assert list(page_figure(w["page_size"]).data[0].x) == ["1 token", "16 tokens", "64 tokens"]
    rows = bucket_rows(x.explanation)
    assert rows["bucket"][-1] == "all prompt tokens"
    assert rows["radix tree (SGLang)"][-1] == f"{x.explanation.prompt_tokens:,} tokens"
    assert {t.name for t in bucket_figure(x.explanation).data} >= {"hit"}
    prefixes = prefix_rows(x.explanation.top_prefixes["tree"], mooncake=True)
    assert prefixes and "first hash ids" in prefixes[0]
    assert all(r["lost"] for r in loser_rows(x.explanation.top_losers["tree"], "tree"))


def test_the_estimate_counts_the_runs_the_what_ifs_make(monkeypatch):
    """The panel's estimate (what_if_estimate) is the watched run's seconds x PLAIN_PER_WATCHED
    x the simulator runs the what-ifs make. Its count, on the Mooncake excerpt at the page's
    capacity (bounded base): unbounded + 8 capacities + 3 page sizes at the base capacity + the
    base itself for namespaces = 13 runs, each a Scheduler built once; priced at 10 s a watched
    run: 10 x 0.6 x 13 = 78 s. Before, the panel guessed WHAT_IF_RUNS (14) x the watched run,
    140 s, while a plain run costs ~0.6 of the watched one (measured, see PLAIN_PER_WATCHED)."""
    from radix.sched.scheduler import Scheduler

    trace = load_trace(TRACES / "mooncake_excerpt.jsonl")
    x = run_explain(trace, "d", 1_000_000, budget=Budget(2**30, 2**31))
    x.seconds = 10.0
    built = []
    real = Scheduler.__init__
    monkeypatch.setattr(Scheduler, "__init__", lambda self, *a, **k: built.append(1) or real(
        self, *a, **k))
    run_what_ifs(trace, x, workers=0)  # in this process, where the count is seen
    assert len(built) == 13
    assert PLAIN_PER_WATCHED == 0.6 and what_if_estimate(trace, x) == pytest.approx(78.0)
    # two workers on a 2-core server at load 1.2 share one free core (issue 41 item 10: the
    # panel said "about 54 s", they took 104-112 s): all 13 runs in turn, 78 s, not 7 x 6 = 42
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert what_if_estimate(trace, x, workers=2) == pytest.approx(78.0)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert what_if_estimate(trace, x, workers=2) == pytest.approx(42.0)


def test_bucket_chart_never_squeezes_a_label():
    """1,000 prompt tokens, a bucket of 3 (0.3%) beside 997: the thin segment says nothing (it
    said "0%", squeezed to 0.8 px, issue 41 item 10); a label that does not fit at 12 px is
    hidden by plotly (uniformtext), never shrunk."""
    from types import SimpleNamespace

    from viz.explain import BUCKETS

    none = dict.fromkeys(BUCKETS, 0)
    e = SimpleNamespace(prompt_tokens=1_000,
                        totals={"tree": {**none, "hit": 997, "first_seen": 3},
                                "blocks": {**none, "hit": 990, "first_seen": 10}})
    fig = bucket_figure(e)
    texts = {t.name: list(t.text) for t in fig.data}
    assert texts["hit"] == ["100%", "99%"] and texts["first seen (compulsory)"] == ["", "1%"]
    assert (fig.layout.uniformtext.minsize, fig.layout.uniformtext.mode) == (12, "hide")
