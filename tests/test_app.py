"""AppTest per page: each renders without exception and shows the right numbers or errors."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE = ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl"


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_tour_starts_empty_and_reaches_the_split():
    """Step 0 shows an empty tree. Five single-event 'next' clicks after the first step
    boundary and R1's insert (step 3, event 1): the tree stores R1's 2,151 tokens."""
    at = AppTest.from_file(str(ROOT / "pages" / "tour.py"), default_timeout=30).run()
    assert not at.exception
    assert _metrics(at)["tree stores (tokens)"] == "0"
    at.session_state["tour.cursor"] = (3, 1)
    at.run()
    assert _metrics(at)["tree stores (tokens)"] == "2,151"
    assert "grows a new leaf #1 of 2,151 tokens" in at.info[0].value
    at.session_state["tour.cursor"] = (5, 0)
    at.button(key="tour.b_next").click().run()
    assert at.session_state["tour.cursor"] == (5, 1)
    assert at.info[0].value.startswith("R2 leaves R1 at token 2,055")


def test_tour_end_numbers():
    """The end of the walk: 4,343 stored, 6,910 apart, 2,567 saved = 321 MiB, 116.5 ms."""
    at = AppTest.from_file(str(ROOT / "pages" / "tour.py"), default_timeout=30)
    at.session_state["tour.cursor"] = (13, 0)
    at.run()
    assert not at.exception
    assert _metrics(at) == {"tree stores (tokens)": "4,343", "stored apart (tokens)": "6,910",
                            "saved (tokens)": "2,567", "saved KV": "321 MiB",
                            "saved prefill": "116.5 ms"}
    at.button(key="tour.b_back").click().run()
    assert at.session_state["tour.cursor"] == (12, 1)  # step 12 has one micro-event


def test_trace_page_without_upload():
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=30).run()
    assert not at.exception
    assert "Upload a trace" in at.info[0].value


def test_app_navigation_runs():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=30).run()
    assert not at.exception


def test_trace_bad_upload_names_line_and_field():
    """Line 2's "tokens" is a string: the error box says so; no exception reaches the page."""
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=30).run()
    bad = (b'{"rid": "a", "arrival": 0, "tokens": [1, 2], "output_len": 1}\n'
           b'{"rid": "b", "arrival": 1, "tokens": "oops", "output_len": 1}\n')
    at.file_uploader(key="trace.upload").set_value(("bad.jsonl", bad, "application/json")).run()
    assert not at.exception
    assert "line 2" in at.error[0].value and '"tokens"' in at.error[0].value


def test_trace_upload_replays_and_scrubs():
    """Two requests sharing [1, 2]: 7 tree steps; at the end the tree holds 2 + 1 + 1 tokens;
    the block summary is there; step 0 is the empty tree."""
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=30).run()
    good = (b'{"rid": "a", "arrival": 0, "tokens": [1, 2, 3], "output_len": 1}\n'
            b'{"rid": "b", "arrival": 1, "tokens": [1, 2, 4], "output_len": 1}\n')
    at.file_uploader(key="trace.upload").set_value(("two.jsonl", good, "application/json")).run()
    assert not at.exception and not at.error
    assert "7 tree steps" in at.subheader[0].value
    assert "Invariants held" in at.success[0].value
    assert "#tokens: 4" in at.code[0].value
    at.slider(key="trace.step").set_value(0).run()
    assert "#tokens: 0" in at.code[0].value


def _plotly_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def test_tour_block_view_beside_the_tree_at_the_end():
    """The end of the walk: hit rates computed for both caches, 2,567 / 6,910 = 37.1% (tree)
    and 2,560 / 6,910 = 37.0% (blocks); picking R2 shows its lookup stopping at block 128
    (2,048 tokens, 7 shared tokens re-prefilled) and outlines its 133 cached chain blocks."""
    at = AppTest.from_file(str(ROOT / "pages" / "tour.py"), default_timeout=30)
    at.session_state["tour.cursor"] = (13, 0)
    at.run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["radix tree"][:2]) == ["2,567 of 6,910", "37.1%"]
    assert list(table["block cache (16-token blocks)"][:2]) == ["2,560 of 6,910", "37.0%"]
    assert any(m.value.startswith("R3: lookup hit 32 blocks (512 tokens)") for m in at.markdown)
    at.selectbox(key="tour.rid").set_value("R2").run()
    text = [m.value for m in at.markdown if m.value.startswith("R2: ")][0]
    assert "stopped at block 128" in text and "7 shared tokens re-prefilled" in text
    chain = [t for t in _plotly_specs(at)[0]["data"] if t.get("name") == "hash chain"]
    assert len(chain[0]["x"]) == 133  # 128 shared with R1 + R2's 5 own full blocks


def test_tour_block_view_before_r2_arrives():
    """After R1 (step 5): R2's lookup has not happened; the pool holds R1's 134 cached blocks."""
    at = AppTest.from_file(str(ROOT / "pages" / "tour.py"), default_timeout=30)
    at.session_state["tour.cursor"] = (5, 0)
    at.session_state["tour.rid"] = "R2"
    at.run()
    assert not at.exception
    assert any(m.value == "R2 has not been looked up yet." for m in at.markdown)
    assert any("134 cached, free" in c.value for c in at.caption)


def test_trace_block_view_at_the_chosen_step():
    """a = tokens 1..48, b = 1..35 + 14 own (49). The tree matches 35 of b's 48 looked-up
    tokens; the block lookup hits blocks 0, 1 (32 tokens) and misses block 2 (tokens 32..47:
    3 shared + 13 own): 3 shared tokens re-prefilled. Slider at step 4 (a done): b not yet."""
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=30).run()
    a = list(range(1, 49))
    b = list(range(1, 36)) + list(range(200, 214))
    data = (json.dumps({"rid": "a", "arrival": 0, "tokens": a, "output_len": 1}) + "\n"
            + json.dumps({"rid": "b", "arrival": 1, "tokens": b, "output_len": 1}) + "\n")
    at.file_uploader(key="trace.upload").set_value(("ab.jsonl", data.encode(), "text/plain"))
    at.run()
    assert not at.exception and not at.error
    assert at.subheader[1].value == "Block cache after 2 of 2 requests"
    text = [m.value for m in at.markdown if m.value.startswith("b: ")][0]
    assert "hit 2 blocks (32 tokens) of 49; stopped at block 2 (tokens 32..47): miss" in text
    assert "The tree matched 35: 3 shared tokens re-prefilled." in text
    at.slider(key="trace.step").set_value(4).run()
    assert at.subheader[1].value == "Block cache after 1 of 2 requests"
    assert at.selectbox(key="trace.block_rid").options == ["a"]
    assert len(_plotly_specs(at)) == 1


def test_trace_mooncake_tree_folds_and_text_is_cut():
    """The Mooncake excerpt ends with 158 nodes: 83 before SGLang 0.5.23's finish split every
    finished request's leaf at its prompt boundary (prompt node + output node). 12 children per
    node: 27 drawn, the other 158 - 27 = 131 fold into one box; 3 per node: 7 drawn, 151 folded.
    (Counts read off the page after the lifecycle change; the app's owner re-derives them.)"""
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=60).run()
    at.file_uploader(key="trace.upload").set_value(("m.jsonl", MOONCAKE.read_bytes(), "text/plain"))
    at.run()
    assert not at.exception and not at.error
    captions = [c.value for c in at.caption]
    assert "158 nodes: 27 drawn, 131 folded into 1 '+K more' box(es), counted in full. Coloured: " \
        "what the step touched." in captions
    at.number_input(key="trace.max_children").set_value(3).run()
    captions = [x.value for x in at.caption]
    assert any(c.startswith("158 nodes: 7 drawn, 151 folded") for c in captions)


def test_trace_big_pretty_print_is_cut_with_a_download():
    """250 requests with distinct first tokens: the root, 250 leaves and the "#tokens" line =
    252 lines of pretty_print; the page shows 200 and says so; the whole text is a download."""
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=60).run()
    data = "".join(json.dumps({"rid": f"r{i}", "arrival": i, "tokens": [1000 + i, 1, 2],
                               "output_len": 1}) + "\n" for i in range(250))
    at.file_uploader(key="trace.upload").set_value(("w.jsonl", data.encode(), "text/plain"))
    at.run()
    assert not at.exception and not at.error
    assert len(at.code[0].value.splitlines()) == 200
    assert any(c.value == "first 200 of 252 lines; download the whole text below"
               for c in at.caption)
    assert "trace.dl_text" in [b.key for b in at.get("download_button")]


def test_trace_kv_events_upload_says_what_it_holds():
    """A KV-events recording has no requests: the page says what it holds (3 batches, 271 blocks
    stored) instead of an all-zero table and an empty tree."""
    at = AppTest.from_file(str(ROOT / "pages" / "trace.py"), default_timeout=30).run()
    data = (ROOT / "examples" / "traces" / "kv_events.jsonl").read_bytes()
    at.file_uploader(key="trace.upload").set_value(("kv.jsonl", data, "application/json")).run()
    assert not at.exception and not at.error
    assert "KV-events recording" in at.subheader[0].value
    assert "271 blocks" in at.info[0].value
    assert not at.dataframe and not at.success
