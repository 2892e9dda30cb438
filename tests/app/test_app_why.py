"""The Trace debugger's "Why did this request miss?" panel and the causes the explainer panel
lists (AppTest). A text trace: a and b differ only in the date on the system prompt's second
line; c repeats a's prompt under another cache_salt."""

from __future__ import annotations

import json

from apphelp import echarts, finish_jobs, page, texts

from viz.why import MARK_TRACE

SYSTEM = "You are the support assistant of Acme Hardware. Be brief and polite.\n"
QUESTION = ("User: where is my order? I placed it last week, it was paid for, and the "
            "tracking page has said the same thing for five days now.")
TRACE = "".join(json.dumps(r) + "\n" for r in (
    {"rid": "a", "arrival": 0, "output_len": 2,
     "text": SYSTEM + "Today is 2026-12-01.\n" + QUESTION},
    {"rid": "b", "arrival": 9, "output_len": 2,
     "text": SYSTEM + "Today is 2026-12-02.\n" + QUESTION},
    {"rid": "c", "arrival": 18, "output_len": 2, "cache_salt": "tenant-2",
     "text": SYSTEM + "Today is 2026-12-01.\n" + QUESTION}))


def report(at) -> str:
    return next(c.value for c in at.code if c.value.startswith("A: request"))


def _upload():
    at = page("trace").run()
    at.file_uploader(key="trace.upload").set_value(("why.jsonl", TRACE.encode(), "text/plain"))
    at.run()
    return finish_jobs(at)


def test_compare_two_requests_shows_the_date_and_the_first_bad_block():
    at = _upload()
    at.session_state["trace.why"] = True
    at.run()
    assert not at.exception and not at.error
    assert at.selectbox(key="trace.why_a").value == "a"
    assert at.selectbox(key="trace.why_b").value == "b"
    assert "A has '2026-12-01', B has '2026-12-02'" in report(at)
    words = " ".join(texts(at.markdown))
    assert "B follows A's path for" in words and "is the first whose hash differs" in words
    drawn = [c.proto.json for c in at.get("bidi_component")]  # the pair's tree is drawn
    assert any("shared: 20 tokens" in d and "A only" in d and "B only" in d for d in drawn)
    # the marks (viz/why.py): the shared node where B leaves A at token 20 (the date's digit)
    assert any('"role": "parting"' in d and "B leaves A here: token 20" in d for d in drawn)
    # and on the grid of blocks of 16 (a keyed ECharts chart, as every page's grid: the plotly
    # figure blanked for a frame after each pick, #24): token 20 is in B's block 1, the first
    # that differs
    (grid,) = [o for key, o in echarts(at) if "trace.why_tree_blocks" in key]
    (star,) = [s for s in grid["series"] if s.get("name") == MARK_TRACE]
    note = star["label"]["formatter"]
    assert note.startswith("◆ B's block 1 (#") and note.endswith("the first whose hash differs")
    assert "a date/time in the prompt" in grid["title"]["text"].replace("\n", " ")
    # presenter mode: the pair's tree keeps 14 px labels (it was drawn at most 1.5 x 9 = 13.5)
    at.session_state["shell.presenter"] = True
    at.run()
    (pair,) = [json.loads(c.proto.json) for c in at.get("bidi_component")
               if c.proto.id.endswith("trace.why_tree")]
    assert (pair["min_font_px"], pair["max_scale"]) == (14.0, 2.4)
    at.session_state["shell.presenter"] = False
    at.selectbox(key="trace.why_b").set_value("c").run()
    assert "kept apart by namespace: cache_salt None vs 'tenant-2'" in report(at)
    assert "different namespaces" in " ".join(texts(at.markdown))


def test_explainer_panel_lists_causes_with_a_button_to_compare():
    from pages._serve import holdings

    at = _upload()
    at.session_state["trace.explain"] = True
    at.run()
    for _ in range(4):
        job = holdings().get(at.session_state["trace.sid"], "trace").get("explain_job")
        if job is None:
            break
        assert job.wait(120)
        at.run()
    assert not at.exception
    words = " ".join(texts(at.markdown))
    assert "Causes found" in words and "a date/time in the prompt" in words
    at.button(key="trace.why_open.b").click().run()
    assert (at.session_state["trace.why_a"], at.session_state["trace.why_b"]) == ("a", "b")
    assert "A has '2026-12-01'" in report(at)


def test_mooncake_trace_compares_hash_ids():
    """A Mooncake trace: mc-2 = ids [1, 2, 9, 10] after mc-1 = [1, 2, 3]; block 2 is the first
    whose id differs, so they share 2 x 512 = 1,024 tokens."""
    lines = "".join(json.dumps({"timestamp": i, "input_length": n, "output_length": 2,
                                "hash_ids": ids}) + "\n"
                    for i, (n, ids) in enumerate([(1536, [1, 2, 3]), (1800, [1, 2, 9, 10])]))
    at = page("trace").run()
    at.file_uploader(key="trace.upload").set_value(("mc.jsonl", lines.encode(), "text/plain"))
    at.run()
    at = finish_jobs(at)
    at.session_state["trace.why"] = True
    at.run()
    assert not at.exception and not at.error
    words = " ".join(texts(at.markdown))
    assert ("Block 2 (tokens [1,024, 1,536)) is the first whose hash id differs: A has id 3, "
            "B has 9") in words
    (rows,) = [d for d in at.dataframe if "A's id" in d.value.columns]
    assert list(rows.value["same id"]) == [True, True, False, False]
