"""scenarios/live.py without a model: the live tree, the session loop, the registry, the prompts.

A fake service stands in for EngineService (same submit / handle API), so polling, one-at-a-time
scenarios, capacity refusals, progress and the registry are checked in milliseconds;
tests/app/test_app_live.py runs the real model.
"""

from __future__ import annotations

import queue
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from radix.events import ListSink, RequestAdmitted
from radix.tree.radix_cache import RadixCache
from runtime.sessions import SessionRegistry
from scenarios.chats import SCENARIOS, SYSTEM
from scenarios.live import LiveSession, LiveTree
from viz.live import measured_label, told_line


class Stamped(types.SimpleNamespace):
    """What EngineService hands its listener: rid, wall_time, source, event."""


def _feed(tree: LiveTree, events: list, rid: str | None, source: str = "tree") -> None:
    for i, e in enumerate(events):
        tree(Stamped(rid=rid, wall_time=100.0 + i, source=source, event=e))


def _lines(tree: LiveTree) -> list[str]:
    return [told_line(t, tree.owners()) for t in tree.told(20)]


def test_live_tree_equals_the_cache_and_tells_the_split():
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
    texts = _lines(tree)
    split = next(t for t in texts if t.startswith("R2 leaves R1 at token 2: node #1 splits "
                                                  "into 2 + 1 (new prefix #2)"))
    assert "keeps #1's creation time t=2" in split  # the unified flavor, the default
    assert "R2 grows a new leaf #3 of 1 token under #2" in texts
    assert tree.owners() == {1: "R1", 2: "R1", 3: "R2"}


def test_live_tree_tells_a_lock_walk_in_one_line():
    """A 3-node path locked then unlocked: one line each way, every hop named, root last."""
    sink = ListSink()
    cache, tree = RadixCache(sink=sink), LiveTree()
    cache.insert([1, 2])
    cache.insert([1, 2, 3, 4])
    leaf = cache.insert([1, 2, 3, 4, 5, 6]).last_node
    _feed(tree, sink.events, "R1")
    sink.events.clear()
    cache.inc_lock_ref(leaf, rid="R9")
    cache.dec_lock_ref(leaf, rid="R9")
    _feed(tree, sink.events, "R9")
    lines = _lines(tree)[-2:]
    assert lines[0] == ("R9 locks #3 → #2 → #1, 3 hops up to the root: lock_ref 1, 1, 1; "
                        "6 tokens now protected")
    assert lines[1].startswith("R9 unlocks #3 → #2 → #1, 3 hops") and "now evictable" in lines[1]


def test_live_tree_tells_the_input_len_minus_one_split():
    """The scheduler matches a repeat's prompt less its last token: the key ends inside the
    first request's leaf, which splits there; the line says why."""
    sink = ListSink()
    cache, tree = RadixCache(sink=sink), LiveTree()
    cache.insert([1, 2, 3, 4])
    _feed(tree, sink.events, "a.1")
    sink.events.clear()
    cache.match_prefix([1, 2, 3], rid="a.2")
    _feed(tree, sink.events, "a.2")
    assert "input_len - 1 = 4 - 1" in _lines(tree)[-1]


def test_live_tree_scheduler_lines_and_unknown_actor():
    """A split during a match without a request id is the scheduler's; blocks are ignored."""
    sink = ListSink()
    cache, tree = RadixCache(sink=sink), LiveTree(max_told=3)
    cache.insert([1, 2, 3])
    _feed(tree, sink.events, "R1")
    sink.events.clear()
    cache.match_prefix([1, 9])
    _feed(tree, sink.events, None)
    _feed(tree, [RequestAdmitted("R2", 1, 1, False, 100)], "R2", source="scheduler")
    _feed(tree, [object()], None, source="blocks")
    texts = _lines(tree)
    assert len(texts) == 3  # bounded
    assert texts[-2].startswith("the scheduler's match leaves R1 at token 1")
    assert texts[-1] == "R2 admitted: 1 token from the tree, 1 to prefill"
    assert tree.admitted() == {"R2": (1, 1)} and tree.chunks() == {"R2": [1]}
    assert tree.snapshot() == cache.snapshot()


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
    def __init__(self, loaded, capacity, *, no_cache=False, listener=None, config=None) -> None:
        self.loaded, self.no_cache, self.handles, self.closed = loaded, no_cache, [], False
        self.cancelled = False
        self.listener, self.config, self.steps = listener, config, []

    def submit(self, ids, max_new_tokens, *, rid):
        self.handles.append((rid, list(ids), FakeHandle()))
        return self.handles[-1][2]

    def close(self, timeout=None, *, cancel=False):
        self.closed, self.cancelled = True, cancel


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
    service = s.service
    s2 = s.restart(no_cache=True)
    assert service.closed and s.closed and not s2.closed
    assert service.cancelled  # a restart cancels what runs: the old thread stops now
    assert s.service is None  # its KV pool goes with it, even while the page keeps `s`
    with pytest.raises(RuntimeError, match="stopped"):
        s.submit("b", [{"role": "user", "content": "y"}], 2)
    assert s2.no_cache and s2.requests is s.requests
    again = s2.submit("a", [{"role": "user", "content": "y"}], 2)
    assert not again.cache_on
    # numbered on from the history (issue 41 item 9: two "a.1" rows, the why panel's picker
    # keyed by rid could not choose the first)
    assert [r.rid for r in s2.requests] == ["a.1", "a.2"]


def test_registry_sweeps_dead_sessions(loaded):
    reg = SessionRegistry()
    a, b, a2 = _session(loaded), _session(loaded), _session(loaded)
    services = {"a": a.service, "b": b.service}
    reg.put("A", a)
    reg.put("B", b)
    reg.put("A", a2)  # a new session for the same browser session closes the old one
    assert services["a"].closed and a.closed and len(reg) == 2
    assert reg.sweep(lambda sid: sid == "A") == ["B"]
    assert services["b"].closed and not a2.service.closed and len(reg) == 1


def test_measured_label_and_scenarios(loaded):
    assert measured_label(loaded) == "measured: Tiny, CPU fp32"
    for sc in SCENARIOS.values():
        assert len(sc.prompts) >= 2
        assert all(m[0]["role"] == "system" and m[0]["content"].startswith(SYSTEM)
                   for _, m in sc.prompts)
    turns = SCENARIOS["multi-turn chat"].prompts
    assert len(turns) == 5 and all(len(b[1]) == len(a[1]) + 2 for a, b in zip(turns, turns[1:]))


def test_progress_waiting_prefill_decode(loaded):
    """Three requests of 10, 20 and 30 prompt tokens: the first decodes (2 of 4 new tokens);
    the second was admitted with 5 matched and chunks of 8 then 7: 8 of 15 prefilled (the
    last chunk is in its forward), nothing ahead of it still prefilling but itself; the third
    waits behind 15 - 8 = 7 tokens. Chunked prefill is on (256 a round)."""
    s = LiveSession(loaded, 200, service_factory=FakeService)
    assert s.service.config.chunked_prefill_size == 256
    a = s.submit("a", [{"role": "user", "content": "x" * 10}], 4)
    b = s.submit("b", [{"role": "user", "content": "y" * 20}], 4)
    s.submit("c", [{"role": "user", "content": "z" * 30}], 4)
    a.output_ids = [1, 2]
    _feed(s.tree, [RequestAdmitted(b.rid, 5, 8, True, 0), RequestAdmitted(b.rid, 5, 7, False, 0)],
          b.rid, source="scheduler")
    p = s.progress()
    assert [(x.stage, x.done, x.total) for x in p] == [("decode", 2, 4), ("prefill", 8, 15),
                                                        ("waiting", 0, 30)]
    assert (p[1].ahead, p[2].ahead, p[2].ahead_tokens) == (0, 1, 7)
    s.service.steps = [types.SimpleNamespace(kind="prefill", extend_lens=[100, 100], seconds=0.5)]
    assert s.prefill_rate() == 400.0
