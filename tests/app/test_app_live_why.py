"""The Live page's "Why did this prompt miss?" panel (AppTest, real default model on CPU): two
typed prompts whose system prompts differ in a date, then a request run here against a typed
prompt with \\r\\n line endings."""

from __future__ import annotations

import pytest
from apphelp import ROOT, echarts
from machine import seconds
from streamlit.testing.v1 import AppTest

from viz.why import MARK_TRACE

PAGE = str(ROOT / "pages" / "live.py")
SYSTEM = "You answer questions about a small shop.\nToday is 2026-12-01.\nBe brief."


def _report(at: AppTest) -> str:
    return next(c.value for c in at.code if c.value.startswith("A: "))


@pytest.mark.engine
def test_typed_prompts_and_a_run_request():
    at = AppTest.from_file(PAGE, default_timeout=seconds(120)).run()
    try:
        at.session_state["live.why"] = True
        at.run()
        at.text_area(key="live.why_sys_a").set_value(SYSTEM)
        at.text_area(key="live.why_sys_b").set_value(SYSTEM.replace("12-01", "12-02")).run()
        assert not at.exception and not at.error
        assert "A has '2026-12-01', B has '2026-12-02'" in _report(at)
        assert any("is the first whose hash differs" in m.value for m in at.markdown)
        drawn = [c.proto.json for c in at.get("bidi_component")]  # the parting node marked
        assert any('"role": "parting"' in d and "B leaves A here: token " in d for d in drawn)
        # the grid: a keyed ECharts chart, as every page's (#24), with the star series
        assert any(s.get("name") == MARK_TRACE for _, o in echarts(at) for s in o["series"])
        at.text_area(key="live.system").set_value(SYSTEM)
        at.text_area(key="live.message").set_value("Hi")
        at.number_input(key="live.max_new").set_value(1)
        at.button(key="live.run").click().run()
        for req in at.session_state["live.session"].requests:
            req.handle.result(timeout=seconds(120))
        rid = at.session_state["live.session"].requests[0].rid
        at.selectbox(key="live.why_a").set_value(rid)
        at.text_area(key="live.why_sys_b").set_value(SYSTEM.replace("\n", "\r\n"))
        at.text_input(key="live.why_msg_b").set_value("Hi").run()
        assert not at.exception
        assert "line endings differ" in _report(at)
    finally:
        session = at.session_state["live.session"] if "live.session" in at.session_state \
            else None
        if session is not None:
            session.close()
