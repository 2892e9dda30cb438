"""AppTest for the Configurations page: four rows with the right numbers, charts, bad uploads."""

from __future__ import annotations

import json

from apphelp import finish_jobs, page, plain
from streamlit.testing.v1 import AppTest


def _page() -> AppTest:
    return page("configs")


def _run(at: AppTest) -> AppTest:
    return finish_jobs(at.run())


def test_three_request_walk_four_rows():
    """The default scenario, the walk, unbounded: baseline and LPM + SLRU match 2,055 + 512 =
    2,567 of 6,910 (37.1%) and prefill 4,343 (4,343 / 22,036 tok/s = 0.197 s); page 16 matches
    2,048 + 512 = 2,560 (37.0%), prefills 4,350; disabled prefills all 6,910 (0.314 s)."""
    at = _run(_page())
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["configuration"]) == ["FCFS + LRU + page 1 (baseline)", "LPM + SLRU",
                                            "page size 16", "cache disabled"]
    assert list(table["hit rate"]) == ["37.1%", "37.1%", "37.0%", "0.0%"]
    assert list(table["tokens prefilled"]) == ["4,343", "4,343", "4,350", "6,910"]
    assert list(table["prefill s (derived)"]) == ["0.197", "0.197", "0.197", "0.314"]
    assert list(table["evicted tokens (tree)"]) == ["0"] * 4
    assert list(table["unreachable blocks"]) == ["0"] * 4
    assert "derived, not measured" in at.caption[1].value
    charts = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    assert len(charts) == 2 and len(charts[0]["data"]) == 4
    assert charts[1]["data"][3]["y"] == [2_151, 4_286, 6_910]  # disabled: every prompt in full


def test_bounded_capacity_evicts():
    """The walk in a 4,000-token pool. Tree, page 1: R1 + R2 hold 2,231; R3 needs 2,112 new,
    1,769 free, so evict 343: LRU leaves R1's 96, R2's 80, then F (1,543, a leaf now): 1,719.
    Page 16 stores whole pages only (2,048 + 96 + 80): 96 + 80 + (2,048 - 512) = 1,712.
    Blocks: 4,000 // 16 = 250; R1 + R2 used 1..140; R3 takes 132 new: R2's partial (140),
    the 110 never used (141..250), then 21 cached blocks from the queue: 21 evictions."""
    at = _page()
    at.session_state["configs.capacity"] = 4_000
    _run(at)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["evicted tokens (tree)"]) == ["1,719", "1,719", "1,712", "0"]
    assert list(table["block evictions"]) == ["21", "21", "21", "0"]
    assert list(table["hit rate"]) == ["37.1%", "37.1%", "37.0%", "0.0%"]  # R3 hits S first
    assert "capacity: 4,000 tokens" in at.subheader[0].value


def test_mooncake_excerpt_runs():
    at = _page()
    at.session_state["configs.source"] = "the Mooncake excerpt"
    _run(at)
    assert not at.exception and not at.error
    assert at.subheader[0].value.startswith("200 requests")
    assert list(at.dataframe[0].value["hit rate"])[3] == "0.0%"


def test_bad_upload_names_line_and_field():
    at = _page()
    at.session_state["configs.source"] = "an uploaded trace"
    at.run()
    assert "Upload a request or Mooncake trace" in at.info[0].value
    bad = b'{"rid": "a", "arrival": 0, "tokens": [1, 2], "output_len": -3}\n'
    at.file_uploader(key="configs.upload").set_value(("bad.jsonl", bad, "text/plain"))
    _run(at)
    assert not at.exception
    assert "line 1" in plain(at.error[0].value) and '"output_len"' in plain(at.error[0].value)
