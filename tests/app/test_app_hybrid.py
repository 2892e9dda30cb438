"""AppTest for the hybrid views: the Tour's hybrid walk, the Eviction lab's component section and
the Trace debugger on a model: each renders without exception, with its component trees, vLLM's
groups and the words' numbers."""

from __future__ import annotations

import json

from apphelp import echarts, finish_jobs, metrics, page, texts
from machine import seconds

from runtime.budget import BUDGET


def _trees(at, suffix: str) -> dict[str, dict]:
    """The tree component whose key ends in `suffix`: its scene's nodes by id."""
    drawn = [c for c in at.get("bidi_component") if c.proto.id.endswith(suffix)]
    return {n["id"]: n for n in json.loads(drawn[0].proto.json)["scene"]["nodes"]}


def test_tour_hybrid_walk_cuts_the_hit_and_draws_the_groups():
    """?walk=hybrid&step=5: R2's match. Llama's tree hits 1,600; Qwen3.5's split node #2 has no
    state: its box says so, outlined as cut; vLLM's Qwen3.5 groups: 3 Mamba rows and a full
    one, the cut at 0; the hits so far. The scrubber's frame 13 (R4's match) is cut to the
    checkpoint at 1,600."""
    at = page("tour")
    at.query_params["walk"], at.query_params["step"] = "hybrid", "5"
    at.run()
    assert not at.exception
    words = texts(at.info)[0]
    assert "Qwen3.5-4B: attention matched 1,600 tokens; no Mamba state at 1,600" in words
    assert "the hit is cut to 0" in words
    qwen = _trees(at, "tour.hybrid.tree1")
    assert (qwen["n2"]["label"], qwen["n2"]["role"]) == ("#2  r=0\nmamba: tombstone  r=0", "cut")
    assert _trees(at, "tour.hybrid.tree0")["n3"]["role"] == "hit"
    grids = {o["title"]["text"]: o for _, o in echarts(at)}
    qgrid = grids["vLLM: R2's lookup by group (block 576)"]
    assert qgrid["yAxis"]["data"][-1] == "group 3: full (1,152)"
    assert qgrid["series"][-1]["markLine"]["data"] == [{"xAxis": 0.0}]
    assert at.dataframe[0].value["Qwen3.5-4B, vLLM"].tolist() == ["0", "0"]
    at.slider(key="tour.hybrid.qwen3.5-4b.scrub.5").set_value(13).run()
    assert "the hit is cut to 1,600, the last checkpoint (node #2)" in texts(at.info)[0]


def _lab(at) -> str:
    """The component section's sentence (the section sits between the lab's and T-LRU's)."""
    starts = ("The next admission", "SWA's LRU", "MAMBA's LRU", "The cascade", "node #")
    return next(t for t in texts(at.info) if t.startswith(starts))


def test_eviction_lab_component_section_tombstones_and_cascades():
    """The section's default: 16 SWA tokens, chat C running. Its last frame is the cascade on
    node #1 with the totals; node #1's box is a tombstone in both components, outlined; the
    metrics say what went per component. Asked for Mamba states instead, only #2's state."""
    at = page("eviction").run()
    assert not at.exception
    assert _lab(at).endswith("Freed in all: 0 full tokens, 16 SWA tokens, 2 Mamba states.")
    n1 = _trees(at, "eviction.hybrid.tree")["n1"]
    assert (n1["label"], n1["role"]) == ("#1  r=0\nswa: tombstone  r=0\nmamba: tombstone  r=0",
                                         "tombstoned")
    m = metrics(at)
    assert m["SWA tokens evictable (protected 32)"] == "56"
    assert m["Mamba states evictable (protected 1)"] == "2"
    at.select_slider(key="eviction.hybrid.k.swa.16.True").set_value(0).run()
    assert "SWA's LRU from the tail: #2, #1, #3, #6, #5, #4 (locked" in _lab(at)
    at.radio(key="eviction.hybrid.ask").set_value("mamba").run()
    assert _lab(at).startswith("MAMBA's LRU tail is node #2 (chat A, 32..40)")


def test_trace_debugger_on_a_model_shows_the_component_tree_and_the_groups():
    """The issue's workload uploaded, 3 requests of 1,600 shared + 600 own tokens, on Qwen3.5-4B
    (hybrid-cli's runs): SGLang hits 0, 0, 1,600 and vLLM 0, 0, 1,152 in all 1,600 and 1,152;
    request 2: attention matched 1,600, no state there, cut to 0 (its split node #2 outlined
    as cut); vLLM's full group 1,152, every Mamba group 0, the junction pinned at 1,152."""
    from pages._serve import holdings

    shared = list(range(1, 1601))
    data = "".join(json.dumps({"rid": f"r{i}", "arrival": i, "output_len": 1, "tokens": shared
                               + list(range(10_000 * (i + 1), 10_000 * (i + 1) + 600))}) + "\n"
                   for i in range(3))
    at = page("trace")
    at.session_state["trace.model"] = "qwen3.5-4b"
    at.run().file_uploader(key="trace.upload").set_value(("w.jsonl", data.encode(), "text/plain"))
    at = finish_jobs(at.run())
    job = holdings().get(at.session_state["trace.sid"], "trace")["hybrid_job"]
    if job is not None:
        assert job.wait(seconds(120))
        at.run()
    assert not at.exception
    table = at.dataframe[0].value
    assert table["engine"].tolist() == ["SGLang 0.5.23", "vLLM 0.33"]
    assert table["hit tokens"].tolist() == ["1,600", "1,152"]
    at.number_input(key="trace.hybrid.i").set_value(2).run()
    assert texts(at.info)[0] == (
        "r1 on Qwen3.5-4B, SGLang: attention matched 1,600 tokens; no Mamba state at 1,600 "
        "(node #2 is a Mamba tombstone): the hit is cut to 0. The match asks r1 to keep a state "
        "at 1,600 (mamba_branching_seqlen).")
    assert _trees(at, "trace.hybrid.tree")["n2"]["role"] == "cut"
    grid = [o for _, o in echarts(at) if o["title"]["text"].startswith("vLLM: the lookup")][0]
    assert grid["yAxis"]["data"][-1] == "group 3: full (1,152)"
    assert "the junction is pinned at 1,152" in " ".join(texts(at.caption))
    assert BUDGET.usage(at.session_state["trace.sid"]).session > 0
