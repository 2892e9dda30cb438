"""The simulated engine: cost model, simulate(), the Mooncake sample, the CLI commands."""

from __future__ import annotations

import contextlib
import json
import math
import signal
from pathlib import Path

import pytest
from machine import seconds

from radix.cli import main
from radix.runs.costs import CostModel
from radix.runs.sim import SimConfig, simulate
from radix.traces import Trace, TraceRequest, load_trace

MOONCAKE = Path(__file__).resolve().parents[3] / "examples/traces/mooncake_synthetic_trace.jsonl.gz"


def burst_trace(n=64):
    prefix = tuple(range(1, 2001))
    return Trace("request", [TraceRequest(f"r{i:02d}", 0.0, prefix + tuple(
        10_000 + i * 16 + j for j in range(16)), 4) for i in range(n)])


def test_cost_model_known_answers():
    """8,192 x 400e12 / 148.7e12 = 22,036 tok/s; the 126,000 duplicate tokens of the cold burst
    cost 126,000 / 22,036 = 5.72 s (DESIGN.md: ~5.7 s); a decode step with no context reads the
    16.06 GB of weights at 3.35 TB/s = 4.79 ms; 1,000 context tokens add 1,000 x 131,072 B."""
    c = CostModel()
    assert round(c.prefill_tokens_per_s) == 22036
    assert c.prefill_seconds(126_000) == pytest.approx(5.718, abs=1e-3)
    assert c.decode_seconds(0) == pytest.approx(4.794e-3, rel=1e-3)
    assert c.decode_seconds(1000) - c.decode_seconds(0) == pytest.approx(131_072e3 / 3.35e12)
    assert "derived, not measured" in c.label
    with pytest.raises(ValueError, match="achieved_flops"):
        CostModel(achieved_flops=0)


def test_simulate_cold_burst_totals_and_ttft():
    """Default budget: 17,024 tokens prefilled (see test_scheduler's cold burst). The first
    round's 8 x 2,016 tokens take 16,128 / 22,036 = 0.732 s: the TTFT of r00..r07."""
    res = simulate(burst_trace(), SimConfig(policy="lpm"))
    t = res.totals
    assert t["prefilled_tokens"] == 17_024 and t["matched_tokens"] == 56 * 2000
    assert t["prefill_seconds"] == pytest.approx(17_024 / CostModel().prefill_tokens_per_s)
    assert res.rows[0].ttft == pytest.approx(16_128 / CostModel().prefill_tokens_per_s)
    assert all(r.decode_tokens == 3 for r in res.rows)  # 4 outputs: 1 from prefill + 3 steps
    assert res.rows[0].ttft == res.rows[7].ttft < res.rows[8].ttft


def test_four_configurations_behave_as_their_names_say():
    """No cache: nothing matched, every token prefilled (64 x 2,016). Page size 16, one request
    per round: every match is a multiple of 16, and 2,000 = 125 x 16, so the 63 followers match
    the whole prefix (their 16-token suffixes are distinct)."""
    trace = burst_trace()
    off = simulate(trace, SimConfig(policy="fcfs", disable_cache=True)).totals
    assert off["matched_tokens"] == 0 and off["prefilled_tokens"] == 64 * 2016
    assert off["block_matched_tokens"] == 0
    paged = simulate(trace, SimConfig(policy="fcfs", page_size=16, max_prefill_tokens=2016))
    assert all(r.matched_tokens % 16 == 0 for r in paged.rows)
    assert paged.totals["matched_tokens"] == 63 * 2000


def test_bounded_capacity_evicts_and_still_completes():
    """Capacity 6,000 tokens for 64 x 2,020 tokens of traffic: eviction fires, all complete."""
    res = simulate(burst_trace(), SimConfig(capacity=6000, max_prefill_tokens=2016))
    assert len(res.rows) == 64 and all(not math.isnan(r.ttft) for r in res.rows)
    assert res.totals["requests"] == 64


def test_mooncake_sample_matches_no_more_than_the_oracle():
    """Unbounded cache, FCFS, the sample's first 1,000 requests in real tokens: all complete.
    Oracle: a request can match at most its longest common prefix with an earlier request
    (token_oracle in tests/radix/traces/test_trace_mooncake.py), capped at its length - 1. It
    matches less only when that request had not been prefilled yet (admitted in the same round, or
    waiting); the total stays within 1% of the oracle's."""
    from tests.radix.traces.test_trace_mooncake import token_oracle

    trace = load_trace(MOONCAKE)
    trace.requests = trace.requests[:1000]
    res = simulate(trace, SimConfig(policy="fcfs", shadow=False))
    assert len(res.rows) == 1000 and all(not math.isnan(r.ttft) for r in res.rows)
    bound = [min(n, len(tr.token_ids) - 1)
             for n, tr in zip(token_oracle(trace.requests), trace.requests)]
    rows = {r.rid: r for r in res.rows}
    assert all(rows[tr.rid].matched_tokens <= b for tr, b in zip(trace.requests, bound))
    matched = sum(r.matched_tokens for r in res.rows)
    assert 0.99 * sum(bound) <= matched <= sum(bound)


def test_simulate_and_configs_commands(tmp_path, capsys):
    path = tmp_path / "burst.jsonl"
    path.write_text("".join(json.dumps({"rid": r.rid, "arrival": 0, "tokens": list(r.token_ids),
                                        "output_len": 4}) + "\n"
                            for r in burst_trace(8).requests))
    assert main(["simulate", str(path), "--policy", "lpm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["totals"]["requests"] == 8 and len(out["requests"]) == 8
    assert main(["configs", str(path), "--capacity", "100000"]) == 0
    text = capsys.readouterr().out
    for name in ("fcfs+lru+page1", "lpm+slru", "page16", "no-cache", "unreachable blocks"):
        assert name in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"rid": "a", "arrival": 0, "tokens": "oops", "output_len": 1}\n')
    assert main(["simulate", str(bad)]) == 2
    assert "line 1" in capsys.readouterr().err


@contextlib.contextmanager
def deadline(base_s: int):
    """Turns a hang into a failure: SIGALRM raises in the main thread after `base_s` seconds on
    an idle machine, stretched by the machine factor (tests/machine.py)."""
    limit = math.ceil(seconds(base_s))

    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {limit} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _trace(*reqs: tuple[str, tuple[int, ...], int]) -> Trace:
    return Trace("request", [TraceRequest(rid, 0.0, toks, out) for rid, toks, out in reqs])


def test_one_token_prompt_runs_with_the_default_capacity():
    """One request, prompt [5], one output token. Admission needs 1 + 1 + a page of 1 = 3 < the
    pool, so the default capacity must hold more than 3 (it used to be 1 + 1 + 1 = 3: a hang)."""
    with deadline(10):
        res = simulate(_trace(("only", (5,), 1)))
    (row,) = res.rows
    assert (row.input_tokens, row.matched_tokens, row.prefilled_tokens) == (1, 0, 1)
    assert res.totals["rejected"] == 0 and row.ttft > 0


def test_a_request_the_pool_can_never_hold_is_rejected_not_waited_on():
    """20-token prompts with 2 new tokens need 20 + 2 + 1 = 23 < capacity: 23 slots reject all
    four (named, with the arithmetic), 24 run all four; the last three match 19 of the first."""
    ids = tuple(range(100, 120))
    trace = _trace(*[(f"i{k}", ids, 2) for k in range(4)])
    with deadline(10):
        small = simulate(trace, SimConfig(capacity=23, max_prefill_tokens=20))
        roomy = simulate(trace, SimConfig(capacity=24, max_prefill_tokens=20))
    assert small.rows == [] and small.totals["rejected"] == 4
    assert "request i0: 20 prompt + 2 new tokens" in small.rejected[0]
    assert "more than 23 slots; it holds 23" in small.rejected[0]
    assert roomy.totals["rejected"] == 0
    assert [r.matched_tokens for r in roomy.rows] == [0, 19, 19, 19]


def test_huge_capacity_does_not_preallocate_a_block_per_token():
    """A 10^9-token capacity: vLLM's pool would preallocate 62.5 M blocks; the shadow keeps only
    what the trace can fill, so two small requests run at once exactly as unbounded. Unbounded
    also means whole blocks for each: (4 + 2) tokens x 2 requests rounded down to 16-token blocks
    used to leave one block for two requests, and the block cache dropped one."""
    trace = _trace(("a", (1, 2, 3, 4), 2), ("b", (1, 2, 3, 5), 2))
    with deadline(10):
        huge = simulate(trace, SimConfig(capacity=10**9))
    assert huge.totals == simulate(trace).totals
    assert huge.totals["block_dropped"] == 0


def test_compare_with_a_huge_capacity_finishes(tmp_path, capsys):
    """The same for `compare`: its block pool stops at what the trace can fill."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"rid": "a", "tokens": [1, 2, 3], "output_len": 2}\n'
                    '{"rid": "b", "tokens": [1, 2, 4], "output_len": 2}\n')
    with deadline(10):
        assert main(["compare", str(path), "--capacity", str(10**9)]) == 0
    assert "hit tokens" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--chunk", "8", "--page-size", "16"], "chunked_prefill_size (8) must be >= page_size (16)"),
    (["--chunk", "0"], "chunked_prefill_size must be >= 1"),
])
def test_chunk_sizes_that_could_never_run_are_refused(tmp_path, capsys, args, words):
    """A chunk is cut to whole pages: a chunk of 8 with pages of 16 is 0 tokens, forever."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"rid": "a", "tokens": [1, 2, 3], "output_len": 2}\n')
    with deadline(10):
        assert main(["simulate", str(path), *args]) == 2
    assert words in capsys.readouterr().err


def test_configs_in_worker_processes_give_what_one_process_gives(capsys):
    """`configs --jobs 2` forks two workers over the loaded trace; the four figures come back
    in order and equal the one-process run's, to the last bit (here on the Mooncake excerpt)."""
    excerpt = Path(__file__).resolve().parents[3] / "examples/traces/mooncake_excerpt.jsonl"
    figures = []
    for jobs in ("1", "2"):
        assert main(["configs", str(excerpt), "--capacity", "300000", "--json",
                     "--jobs", jobs]) == 0
        figures.append(json.loads(capsys.readouterr().out))
    assert figures[0] == figures[1]
    assert list(figures[1]) == ["fcfs+lru+page1", "lpm+slru", "page16", "no-cache"]
    with pytest.raises(SystemExit):
        main(["configs", str(excerpt), "--jobs", "0"])
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
