"""AppTest per page: each renders without exception and shows the right numbers or errors."""

from __future__ import annotations

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
