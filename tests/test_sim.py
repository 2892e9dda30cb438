"""The simulated engine: cost model, simulate(), the Mooncake sample, the CLI commands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.costs import CostModel
from engine.sim import SimConfig, simulate
from radix.cli import main
from radix.trace import Trace, TraceRequest, load_trace

MOONCAKE = Path(__file__).resolve().parents[2] / "shared/traces/mooncake_synthetic_trace.jsonl"


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


@pytest.mark.skipif(not MOONCAKE.exists(), reason="the Mooncake sample is not here")
def test_mooncake_sample_matches_no_more_than_the_oracle():
    """Unbounded cache, FCFS: all 3,993 requests complete. Oracle: a request can match at most
    its longest common prefix with an earlier request (in 512-token units, capped at its length
    - 1). It can match less only when that request was admitted in the same round; the total
    stays within 0.01% of the oracle's."""
    trace = load_trace(MOONCAKE)
    res = simulate(trace, SimConfig(policy="fcfs", shadow=False))
    assert len(res.rows) == 3993 and all(not math.isnan(r.ttft) for r in res.rows)
    seen: set[tuple[int, ...]] = set()
    bound_units = 0
    for tr, row in zip(trace.requests, res.rows):
        ids, n = tr.token_ids, 0
        while n < len(ids) - 1 and ids[: n + 1] in seen:
            n += 1
        seen.update(ids[:k] for k in range(1, len(ids) + 1))
        bound_units += n
        assert row.matched_tokens <= min(n * 512, row.input_tokens)
    matched_units = sum(-(-r.matched_tokens // 512) for r in res.rows)
    assert bound_units * 0.9999 <= matched_units <= bound_units


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
