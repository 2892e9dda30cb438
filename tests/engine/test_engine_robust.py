"""The engine service cannot be wedged (issue 14): rids, one request's failure, a dead loop,
close() answering everyone, the context length, and a thread race of submit against close.
Issue 40: sampling bounded and clamped as vLLM and SGLang do (a tiny temperature is greedy, the
replica stays up), and a draw that fails fails only its request.

Every request here is a few tokens long with one or two new tokens, so the tests stay quick on
two cores; every wait has a timeout, so a hang fails instead of blocking the suite.
"""

from __future__ import annotations

import threading

import pytest
from machine import seconds

from engine.handles import RequestCancelled

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
SamplingParams = EngineService = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global SamplingParams, EngineService
    from engine.sampling import SamplingParams
    from engine.service import EngineService


pytestmark = pytest.mark.engine
PROMPT = [1, 2, 3, 4]


def test_a_duplicate_rid_is_refused_and_generated_ids_skip_users_ones(smol):
    """A user takes "req-2" first: the generated ids go req-1, req-3 (req-2 is skipped); a
    second "same" and a user "req-1" (already generated) are refused at submit, and the
    engine keeps serving."""
    with EngineService(smol, 512) as service:
        same = service.submit(PROMPT, 1, rid="same")
        with pytest.raises(ValueError, match="already used"):
            service.submit(PROMPT, 1, rid="same")
        taken = service.submit(PROMPT, 1, rid="req-2")
        first, second = service.submit(PROMPT, 1), service.submit(PROMPT, 1)
        assert (first.rid, second.rid) == ("req-1", "req-3")
        with pytest.raises(ValueError, match="already used"):
            service.submit(PROMPT, 1, rid="req-1")
        for h in (same, taken, first, second):
            assert len(h.result(timeout=seconds(60)).output_ids) == 1


def test_one_requests_failure_fails_only_it(smol):
    """A listener that raises (a client gone) and a stop check that raises fail their own
    requests; the request beside them and the next one finish."""
    def broken_listener(chunk):
        raise ConnectionError("client went away")

    with EngineService(smol, 512) as service:
        bad = service.submit(PROMPT, 2, listener=broken_listener)
        ok = service.submit([5, 6, 7], 2)
        assert len(ok.result(timeout=seconds(60)).output_ids) == 2
        with pytest.raises(ConnectionError):
            bad.result(timeout=seconds(60))

        def broken_detokenize(ids):
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad byte")
        service._detokenize = broken_detokenize  # this request's stop-string check fails
        failing = service.submit(PROMPT, 3, sampling=SamplingParams(stop=("x",)))
        with pytest.raises(UnicodeDecodeError):
            failing.result(timeout=seconds(60))
        assert service.alive
        assert len(service.submit([8, 9], 2).result(timeout=seconds(60)).output_ids) == 2


def test_a_dead_loop_fails_pending_and_later_calls_at_once_with_its_cause(smol):
    service = EngineService(smol, 512)

    def crash(*args):
        raise MemoryError("the model ran out of memory")
    service.runner.extend = crash
    pending = [service.submit(PROMPT, 2) for _ in range(3)]
    for h in pending:
        with pytest.raises(MemoryError, match="ran out"):
            h.result(timeout=seconds(60))
    with pytest.raises(RuntimeError, match="loop died.*ran out"):
        service.submit(PROMPT, 1)
    with pytest.raises(RuntimeError, match="loop died"):
        service.call(lambda: 1, timeout=5)
    with pytest.raises(RuntimeError, match="loop died"):
        service.close(timeout=seconds(10))
    assert not service.alive


def test_close_answers_every_accepted_request(smol):
    """Drain (default): all finish. cancel=True: each one not finished gets RequestCancelled;
    the thread is joined either way."""
    service = EngineService(smol, 512)
    handles = [service.submit(PROMPT, 2) for _ in range(4)]
    service.close(timeout=seconds(60))
    assert not service.alive
    assert all(len(h.result(timeout=0).output_ids) == 2 for h in handles)

    service = EngineService(smol, 512)
    handles = [service.submit(PROMPT, 30) for _ in range(4)]
    service.close(timeout=seconds(60), cancel=True)
    assert not service.alive
    for h in handles:
        assert h.done
        try:
            h.result(timeout=0)
        except RequestCancelled:
            pass


def test_context_length_is_checked_at_submit_with_the_figures(smol):
    with EngineService(smol, 512) as service:
        assert service.max_context == 8_192
        with pytest.raises(ValueError, match=r"8,192 tokens.*8,194 \(4 in the prompt, 8,190 new"):
            service.submit(PROMPT, 8_190)


def test_submit_racing_close_loses_nothing(smol):
    """4 threads submit 1-token requests as fast as they can while close(cancel=True) runs:
    every submit either raised (closed) or returned a handle that is answered, finished or
    cancelled, by the time close returned. (Before, 2 of 410 accepted requests were lost.)"""
    service = EngineService(smol, 4_096)
    accepted, refused, lock, go = [], [0], threading.Lock(), threading.Event()

    def submitter() -> None:
        go.wait()
        while True:
            try:
                h = service.submit(PROMPT, 1)
            except RuntimeError:
                with lock:
                    refused[0] += 1
                return
            with lock:
                accepted.append(h)

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for t in threads:
        t.start()
    go.set()
    while len(accepted) < 40:
        threading.Event().wait(0.01)
    service.close(timeout=seconds(120), cancel=True)
    for t in threads:
        t.join(timeout=seconds(30))
    assert refused[0] == 4 and len(accepted) >= 40
    unanswered = [h.rid for h in accepted if not h.done]
    assert not unanswered, f"{len(unanswered)} of {len(accepted)} never answered"
    finished = sum(1 for h in accepted if h._error is None)
    cancelled = sum(1 for h in accepted if isinstance(h._error, RequestCancelled))
    assert finished + cancelled == len(accepted)


def test_sampling_is_bounded_and_clamped_as_vllm_and_sglang_do():
    """vLLM 0.33 (sampling_params.py): temperature finite in [0, 2], _SAMPLING_EPS 1e-5
    greedy, 0 < t < _MAX_TEMP 1e-2 raised to 1e-2; SGLang 0.5.23: below 1e-6 greedy. A seed
    is an int64 (vLLM's protocol); a boolean is no number."""
    for bad in ({"temperature": float("inf")}, {"temperature": float("nan")},
                {"temperature": 2.5}, {"temperature": True}, {"seed": 2**63}, {"top_k": 1.5}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    for tiny in (1e-40, 1e-300, 5e-324, 9.9e-6):
        assert SamplingParams(tiny, top_p=0.5, top_k=3).clamped() == SamplingParams()
    assert SamplingParams(1e-3).clamped().temperature == 0.01
    assert SamplingParams(0.7).clamped().temperature == 0.7


def test_a_tiny_temperature_gets_the_greedy_answer_and_the_replica_stays_up(smol):
    """temperature 1e-40, 1e-300 and 5e-324 (the issue's), and a subnormal top_p at
    temperature 1: before, logits / 1e-40 overflowed to inf, softmax gave NaN, and the
    RuntimeError ended the replica's loop for good. Now each answer is the greedy one (a
    subnormal top_p keeps the likeliest token only) and the loop serves the next request."""
    with EngineService(smol, 512) as service:
        greedy = service.submit(PROMPT, 2, sampling=SamplingParams()).result(seconds(60))
        for params in (SamplingParams(1e-40), SamplingParams(5e-324, seed=1),
                       SamplingParams(1.0, top_p=5e-324, seed=2)):
            got = service.submit(PROMPT, 2, sampling=params).result(seconds(60))
            assert got.output_ids == greedy.output_ids, params
        assert service.alive
        assert len(service.submit([8, 9], 2).result(timeout=seconds(60)).output_ids) == 2


def test_a_draw_that_fails_fails_its_own_request_and_is_logged(smol, monkeypatch, caplog):
    """A draw that raises (the sampler of one request broken) fails that request, with its
    cause and one log line; the request in the same batch and the next one are answered, and
    the loop lives (a draw's error ended the loop before)."""
    import logging

    import engine.runner as runner

    real = runner.sample

    def broken(logits, params, generator):
        if params.seed == 13:
            raise RuntimeError("probability tensor contains inf")
        return real(logits, params, generator)
    monkeypatch.setattr(runner, "sample", broken)
    caplog.set_level(logging.WARNING, logger="engine")
    with EngineService(smol, 512) as service:
        bad = service.submit(PROMPT, 3, sampling=SamplingParams(1.0, seed=13))
        ok = service.submit([5, 6, 7], 3, sampling=SamplingParams(1.0, seed=14))
        with pytest.raises(RuntimeError, match="contains inf"):
            bad.result(timeout=seconds(60))
        assert len(ok.result(timeout=seconds(60)).output_ids) == 3 and service.alive
        assert len(service.submit([8, 9], 2).result(timeout=seconds(60)).output_ids) == 2
    (line,) = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert line == (f"request {bad.rid} failed while running it: RuntimeError: probability "
                    "tensor contains inf")
