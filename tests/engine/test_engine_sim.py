"""EngineService over the simulated backend (engine/backends.py): no model, the same loop.

The simulated runner replies with REPLY's tokens; the service, its rids, its failure handling
and close() are the ones the real model runs under (the classroom's rooms use this path).
"""

from __future__ import annotations

import pytest
from machine import seconds

from scenarios.classroom import CharTokenizer, SimLoaded

# the engine (torch): imported by _imports before this file's first test, not at collection
REPLY = simulated = EngineService = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global REPLY, simulated, EngineService
    from engine.backends import REPLY, simulated
    from engine.service import EngineService


@pytest.fixture
def service():
    s = EngineService(SimLoaded(CharTokenizer()), 1_000, backend=simulated())
    yield s
    s.close(timeout=seconds(30), cancel=True)


def test_simulated_requests_reply_and_share_the_prefix(service):
    """Prompt "hello world" (11 char tokens), 3 new tokens: the reply is REPLY's first three
    characters. The first request caches prompt + 2 outputs (the last output's KV is never
    computed); the same prompt again matches input_len - 1 = 10 tokens (SGLang's cap)."""
    prompt = [ord(c) for c in "hello world"]
    first = service.submit(prompt, 3, rid="a").result(timeout=seconds(30))
    assert first.text == REPLY[:3] and first.metrics["matched_tokens"] == 0
    second = service.submit(prompt, 3, rid="b").result(timeout=seconds(30))
    assert second.metrics["matched_tokens"] == 10
    assert service.call(service.tree.total_size) == 13


def test_one_bad_request_does_not_stop_the_loop(service):
    """A request whose listener raises (a client gone mid-stream) fails alone: the loop goes
    on, and the next request is answered."""
    def gone(chunk):
        if chunk is not None:
            raise ConnectionError("client left")

    bad = service.submit([1, 2, 3], 4, rid="bad", listener=gone)
    with pytest.raises(ConnectionError, match="client left"):
        bad.result(timeout=seconds(30))
    good = service.submit([1, 2, 3, 4], 2, rid="good").result(timeout=seconds(30))
    assert good.output_ids == [ord(c) for c in REPLY[:2]] and service.alive


def test_bad_input_is_refused_at_submit(service):
    """Checked on the caller's thread, before the loop sees it: empty prompts, negative ids,
    a reused rid, a prompt the pool could never hold."""
    with pytest.raises(ValueError, match="non-empty"):
        service.submit([], 2)
    with pytest.raises(ValueError, match="non-empty"):
        service.submit([-1], 2)
    service.submit([5], 1, rid="x").result(timeout=seconds(30))
    with pytest.raises(ValueError, match="x"):
        service.submit([5], 1, rid="x")
    with pytest.raises(ValueError):
        service.submit(list(range(2_000)), 1)
    assert service.alive
