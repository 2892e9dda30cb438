"""engine/procservice.py: the engine service in a spawned child, behind EngineService's calls.

Over the simulated backend (no model: the child still imports torch, seconds), the proxy gives
the in-thread service's results and its events in the same order; a bad request is refused and
the loop goes on; closing (the service, a LiveSession, or the parent dying) ends the child, and
a killed child fails what waits instead of hanging. One test runs the real model.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from machine import poll_until, seconds

from scenarios.classroom import CharTokenizer, SimLoaded

ROOT = Path(__file__).resolve().parents[2]
# the engine (torch): imported by _imports before this file's first test, not at collection
EngineService = ProcessService = SimBackend = simulated = RequestCancelled = None

pytestmark = pytest.mark.engine


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global EngineService, ProcessService, SimBackend, simulated, RequestCancelled
    from engine.backends import SimBackend, simulated
    from engine.handles import RequestCancelled
    from engine.procservice import ProcessService
    from engine.service import EngineService


def _sim(step_s: float = 0.0, **kw):
    return ProcessService(SimLoaded(CharTokenizer()), 1_000,
                          backend=functools.partial(SimBackend, step_s=step_s), **kw)


def _gone(pid: int) -> bool:
    """No such process, or a zombie (exited, not yet reaped by whoever adopted it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_results_and_events_as_the_in_thread_service():
    """"hello world" (11 char tokens) twice, 3 new tokens: the second matches 11 - 1 = 10
    (SGLang's cap), in the child as on a thread. Every stamped event (rid, source, event)
    reaches this process's listener in the order the in-thread service emits it, the
    constructor's reset step first; the step reports come over too (one per step)."""
    prompt = [ord(c) for c in "hello world"]
    seen, runs = {}, {}
    for name, make in (("thread", lambda **kw: EngineService(
            SimLoaded(CharTokenizer()), 1_000, backend=simulated(), **kw)), ("process", _sim)):
        events: list = []
        with make(listener=events.append) as service:
            runs[name] = [service.submit(prompt, 3, rid=r).result(timeout=seconds(30))
                          for r in ("a", "b")]
            steps = len(service.steps)
            blocks = service.snapshot_blocks().result(timeout=seconds(30))
        seen[name] = [(e.rid, e.source, e.event) for e in events]
    assert runs["process"] == runs["thread"]  # the simulated clock: the metrics too
    assert [r.metrics["matched_tokens"] for r in runs["process"]] == [0, 10]
    assert seen["process"] == seen["thread"] and seen["process"][0][2].op == "reset"
    assert steps == 6 and blocks.num_blocks == 1_000 // 16 + 1


def test_a_bad_request_is_refused_and_the_loop_goes_on():
    """A reused rid, an empty prompt and a prompt past the pool are ValueErrors from submit
    (raised in the child, carried over); a request whose own listener fails, fails alone;
    the next request is answered by the same child."""
    with _sim() as service:
        service.submit([1, 2, 3], 2, rid="a").result(timeout=seconds(30))
        for bad in (dict(prompt=[1, 2], rid="a"), dict(prompt=[]), dict(prompt=[1] * 2_000)):
            with pytest.raises(ValueError):
                service.submit(bad.pop("prompt"), 2, **bad)

        def gone(chunk):
            if chunk is not None:
                raise ConnectionError("client left")

        with pytest.raises(ConnectionError, match="client left"):
            service.submit([4, 5], 3, listener=gone).result(timeout=seconds(30))
        good = service.submit([1, 2, 3, 4], 2, rid="good").result(timeout=seconds(30))
        assert good.metrics["matched_tokens"] == 3 and service.alive


def test_close_cancels_and_the_child_exits():
    """close(cancel=True) while a slow request runs (0.2 s a step, 50 tokens): it gets
    RequestCancelled, the child exits with code 0, later calls raise; a LiveSession's close
    (the app's Reset, the session registry's sweep) ends its child the same way."""
    from scenarios.live import LiveSession

    service = _sim(step_s=0.2)
    slow = service.submit([1, 2, 3], 50)
    poll_until(lambda: service.steps, 30, lambda: "no step yet")
    service.close(timeout=seconds(30), cancel=True)
    with pytest.raises(RequestCancelled):
        slow.result(timeout=seconds(30))
    assert service.process.exitcode == 0 and not service.alive
    with pytest.raises(RuntimeError, match="closed"):
        service.submit([1], 1)
    session = LiveSession(SimLoaded(CharTokenizer()), 1_000, service_factory=functools.partial(
        ProcessService, backend=functools.partial(SimBackend, step_s=0.2)))
    req = session.submit("you", [{"role": "user", "content": "hi"}], 40)
    process = session.service.process
    session.close()
    assert process.exitcode == 0
    with pytest.raises(RequestCancelled):
        req.handle.result(timeout=seconds(30))


def test_a_killed_child_fails_what_waits_instead_of_hanging():
    """A child killed mid-request: the request, the next submit and close() each raise
    "the engine process is gone" with its exit code (-9), at once."""
    service = _sim(step_s=0.2)
    waiting = service.submit([1, 2, 3], 50)
    os.kill(service.process.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"engine process is gone \(exit code -9\)"):
        waiting.result(timeout=seconds(30))
    with pytest.raises(RuntimeError, match="engine process is gone"):
        service.submit([1], 1)
    with pytest.raises(RuntimeError, match="engine process is gone"):
        service.close()


def test_the_child_exits_when_its_parent_is_killed(tmp_path):
    """No orphan: a parent that starts an engine child and is then killed (SIGKILL: no
    cleanup runs) leaves no engine behind; the child reads the end of its pipe and exits."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import functools, sys, time
        from engine.backends import SimBackend
        from engine.procservice import ProcessService
        from scenarios.classroom import CharTokenizer, SimLoaded
        s = ProcessService(SimLoaded(CharTokenizer()), 1_000,
                           backend=functools.partial(SimBackend, step_s=0.2))
        s.submit([1, 2, 3], 1_00)
        print(s.process.pid, flush=True)
        time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
    finally:
        parent.kill()
        parent.wait()
    poll_until(lambda: _gone(child), 60, lambda: f"engine child {child} still running")


def test_real_model_in_the_child_gives_the_in_thread_text(smol):
    """Two prompts sharing 40 tokens, greedy, 5 new tokens each, one after the other: the
    child's ids and matched tokens are the in-thread engine's, the second matching >= 40."""
    from engine.procservice import ProcessService as Proc

    shared = list(range(1_000, 1_040))
    prompts = [shared + [7, 8, 9], shared + [11, 12]]
    runs = []
    for make in (EngineService, Proc):
        with make(smol, 512) as service:
            runs.append([service.submit(p, 5).result(timeout=seconds(300)) for p in prompts])
    (a1, a2), (b1, b2) = runs
    assert (b1.output_ids, b2.output_ids) == (a1.output_ids, a2.output_ids)
    assert b2.metrics["matched_tokens"] == a2.metrics["matched_tokens"] >= 40
