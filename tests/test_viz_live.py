"""The Live engine page's functions without a model: the live tree, the table, the session loop.

A fake service stands in for EngineService (same submit / handle API), so polling, one-at-a-time
scenarios, capacity refusals and the registry are checked in milliseconds; tests/test_app_live.py
runs the real model.
"""

from __future__ import annotations

import queue
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from radix.events import ListSink, RequestAdmitted
from radix.tree.radix_cache import RadixCache
from viz.live import LiveRequest, LiveSession, SessionRegistry, measured_label
from viz.live_scenarios import SCENARIOS, SYSTEM
from viz.live_table import request_rows, totals
from viz.live_tree import LiveTree, format_lines, narrate_scheduler


class Stamped(types.SimpleNamespace):
    """What EngineService hands its listener: rid, wall_time, source, event."""


def _feed(tree: LiveTree, events: list, rid: str | None, source: str = "tree") -> None:
    for i, e in enumerate(events):
        tree(Stamped(rid=rid, wall_time=100.0 + i, source=source, event=e))


def test_live_tree_equals_the_cache_and_narrates_the_split():
    """R1 inserts [1, 2, 3]; R2 inserts [1, 2, 4]: node #1 splits at token 2 into 2 + 1,
    R2's leaf #3 holds 1 token. The live copy equals the cache's own snapshot."""
    sink = ListSink()
    cache, tree = RadixCache(sink=sink), LiveTree()
    cache.insert([1, 2, 3])
    _feed(tree, sink.events, "R1")
    sink.events.clear()
    cache.insert([1, 2, 4])
    _feed(tree, sink.events, "R2")
    assert tree.snapshot() == cache.snapshot()
    texts = [t for _, t in tree.lines(10)]
    assert "R2 leaves R1 at token 2: node #1 splits into 2 + 1 (new prefix #2)" in texts
    assert "R2 grows a new leaf #3 of 1 tokens under #2" in texts
    assert tree.owners() == {1: "R1", 2: "R1", 3: "R2"}


def test_live_tree_scheduler_lines_and_unknown_actor():
    """A split during a match without a request id is the scheduler's; blocks are ignored."""
    sink = ListSink()
    cache, tree = RadixCache(sink=sink), LiveTree(max_lines=3)
    cache.insert([1, 2, 3])
    _feed(tree, sink.events, "R1")
    sink.events.clear()
    cache.match_prefix([1, 9])
    _feed(tree, sink.events, None)
    _feed(tree, [RequestAdmitted("R2", 1, 1, False, 100)], "R2", source="scheduler")
    _feed(tree, [object()], None, source="blocks")
    texts = [t for _, t in tree.lines(10)]
    assert len(texts) == 3  # bounded
    assert texts[-2].startswith("the scheduler's match leaves R1 at token 1")
    assert texts[-1] == "R2 admitted: 1 tokens from the tree, 1 to prefill"
    assert tree.admitted() == {"R2": (1, 1)}
    assert tree.snapshot() == cache.snapshot()


def test_narrate_scheduler_and_ages():
    assert narrate_scheduler(RequestAdmitted("r", 2_055, 80, True, 0)) == (
        "r admitted: 2,055 tokens from the tree, 80 to prefill (chunked: more next round)")
    assert narrate_scheduler(object()) is None
    assert format_lines([(100.0, "x")], now=102.5) == ["2.5 s ago: x"]


def _req(rid: str, metrics: dict | None, n_out: int = 2) -> LiveRequest:
    return LiveRequest(rid, rid, True, 2_151, None, list(range(n_out)), metrics)


def test_rows_known_answer():
    """R2 matched 2,055, prefilled 80: 2,055 / 22,036 tok/s = 93.3 ms of H100 prefill saved,
    2,055 x 128 KiB = 256.9 MiB of KV; TTFT 0.25 s = 250.0 ms. Newest first; running rows
    have no numbers yet."""
    done = _req("R2", {"matched_tokens": 2_055, "prefilled_tokens": 80, "ttft": 0.25,
                       "decode_tps": 12.345})
    rows = request_rows([done, _req("R3", None, 1)])
    assert rows[0]["request"] == "R3" and rows[0]["status"] == "running"
    assert rows[0]["matched"] is None and rows[0]["output tokens"] == 1
    admitted = request_rows([done, _req("R3", None, 1)], admitted={"R3": (512, 2_112)})
    assert (admitted[0]["matched"], admitted[0]["prefilled"]) == (512, 2_112)
    assert admitted[0]["TTFT ms (measured)"] is None
    r = rows[1]
    assert (r["matched"], r["prefilled"], r["status"]) == (2_055, 80, "done")
    assert r["saved prefill ms (derived)"] == 93.3
    assert r["saved KV MiB (derived)"] == 256.9
    assert (r["TTFT ms (measured)"], r["decode tok/s (measured)"]) == (250.0, 12.3)


def test_totals_known_answer():
    """Matched 300 + 0, prefilled 100 + 400: hit rate 300 / 800 = 0.375; 300 tokens at
    22,036 tok/s = 13.6 ms derived."""
    reqs = [_req("a", {"matched_tokens": 300, "prefilled_tokens": 100, "ttft": 0.1}),
            _req("b", {"matched_tokens": 0, "prefilled_tokens": 400, "ttft": 0.1}),
            _req("c", None)]
    t = totals(reqs)
    assert (t.finished, t.matched, t.prefilled, t.hit_rate) == (2, 300, 500, 0.375)
    assert round(t.saved_prefill_ms, 1) == 13.6
    assert totals([]).hit_rate == 0.0


# --- LiveSession over a fake service -------------------------------------------------------

class FakeTokenizer:
    """A chat template that is one id per character of each message's content."""

    def apply_chat_template(self, messages, **kw):
        return {"input_ids": [ord(ch) for m in messages for ch in m["content"]]}

    def decode(self, ids, **kw):
        return "".join(chr(i) for i in ids)


class FakeHandle:
    def __init__(self) -> None:
        self.stream: list[int] = []
        self.final = None

    def result(self, timeout=None):
        if self.final is None:
            raise TimeoutError
        return self.final

    def tokens(self, timeout=None):
        while self.stream:
            yield self.stream.pop(0)
        raise queue.Empty


class FakeService:
    def __init__(self, loaded, capacity, *, no_cache=False, listener=None) -> None:
        self.loaded, self.no_cache, self.handles, self.closed = loaded, no_cache, [], False

    def submit(self, ids, max_new_tokens, *, rid):
        self.handles.append((rid, list(ids), FakeHandle()))
        return self.handles[-1][2]

    def close(self, timeout=None):
        self.closed = True


def _finish(handle: FakeHandle, out: list[int]) -> None:
    handle.final = types.SimpleNamespace(output_ids=out, metrics={"matched_tokens": 0,
                                                                  "prefilled_tokens": 3,
                                                                  "ttft": 0.1})


@dataclass
class FakeLoaded:
    """The fields of engine.model.LoadedModel that LiveSession and measured_label read."""

    tokenizer: Any
    name: str = "Tiny"
    dtype: str = "torch.float32"
    device: Any = field(default_factory=lambda: types.SimpleNamespace(type="cpu"))


@pytest.fixture
def loaded():
    return FakeLoaded(FakeTokenizer())


def _session(loaded, **kw) -> LiveSession:
    kw.setdefault("service_factory", FakeService)
    return LiveSession(loaded, 20, **kw)


def test_session_streams_then_finishes(loaded):
    s = _session(loaded)
    req = s.submit("you", [{"role": "user", "content": "abc"}], 4)
    assert (req.rid, req.prompt_len, req.cache_on) == ("you.1", 3, True)
    rid, ids, handle = s.service.handles[0]
    assert ids == [97, 98, 99] and s.pending
    handle.stream += [104, 105]
    s.poll()
    assert s.text(req) == "hi" and s.pending
    _finish(handle, [104, 105, 33])
    s.poll()
    assert not s.pending and s.text(req) == "hi!" and req.metrics["prefilled_tokens"] == 3


def test_session_one_at_a_time_and_capacity(loaded):
    """Two prompts one at a time: the second is submitted only once the first is done.
    A 18-token prompt + 4 new tokens does not fit a 20-token pool."""
    s = _session(loaded)
    prompts = [("a", [{"role": "user", "content": "x"}]), ("b", [{"role": "user", "content": "y"}])]
    s.submit_all(prompts, 2, one_at_a_time=True)
    assert [h[0] for h in s.service.handles] == ["a.1"]
    s.poll()
    assert len(s.service.handles) == 1
    _finish(s.service.handles[0][2], [1, 2])
    s.poll()
    assert [h[0] for h in s.service.handles] == ["a.1", "b.2"] and s.pending
    with pytest.raises(ValueError, match="do not fit the 20-token KV pool"):
        s.submit("long", [{"role": "user", "content": "z" * 18}], 4)


def test_restart_keeps_history_and_closes(loaded):
    s = _session(loaded)
    s.submit("a", [{"role": "user", "content": "x"}], 2)
    s2 = s.restart(no_cache=True)
    assert s.service.closed and s.closed and not s2.closed
    assert s2.no_cache and s2.requests is s.requests
    assert not s2.submit("b", [{"role": "user", "content": "y"}], 2).cache_on


def test_registry_sweeps_dead_sessions(loaded):
    reg = SessionRegistry()
    a, b, a2 = _session(loaded), _session(loaded), _session(loaded)
    reg.put("A", a)
    reg.put("B", b)
    reg.put("A", a2)  # a new session for the same browser session closes the old one
    assert a.service.closed and len(reg) == 2
    assert reg.sweep(lambda sid: sid == "A") == ["B"]
    assert b.service.closed and not a2.service.closed and len(reg) == 1


def test_measured_label_and_scenarios(loaded):
    assert measured_label(loaded) == "measured: Tiny, CPU fp32"
    for sc in SCENARIOS.values():
        assert len(sc.prompts) >= 3
        assert all(m[0]["role"] == "system" and m[0]["content"].startswith(SYSTEM)
                   for _, m in sc.prompts)
