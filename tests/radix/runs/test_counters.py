"""The hit rates vLLM's logger and SGLang's metrics would show (radix/runs/counters.py): known
answers for each counting rule, and the `rates` command. tools/diff_vllm_metrics.py checks the
sliding window against vLLM's own CachingMetrics (0 mismatches on the example traces)."""

from __future__ import annotations

from pathlib import Path

from radix.cli import main
from radix.runs.counters import Lookup, SlidingHitRate, engine_rates, step_stats
from radix.runs.sim import SimConfig
from radix.traces import Trace, TraceRequest


def test_two_identical_prompts():
    """a, b: the same 40 tokens, blocks of 16. vLLM: queries 40 + 40, hits 0 + 32 (2 blocks,
    capped at 39 tokens) -> 0.4. SGLang: batch 2 caches 39, computes 1 -> 0.975; both batches:
    39 / 80. RadixLens: tree 39 / 80, blocks 32 / 80."""
    t = Trace("request", [TraceRequest(r, a, tuple(range(40)), 2) for r, a in
                          (("a", 0.0), ("b", 9.0))])
    r = engine_rates(t, SimConfig(policy="fcfs"))
    assert (r.vllm_logged, r.vllm_lifetime) == (0.4, 0.4)
    assert (r.sglang_last_batch, r.sglang_overall) == (39 / 40, 39 / 80)
    assert (r.tree_hit_rate, r.block_hit_rate) == (39 / 80, 32 / 80)


def test_sliding_window_drops_whole_old_steps_but_keeps_the_newest():
    """max 3 requests: steps of 2, 2, 5 requests. After step 2 (4 > 3) step 1 goes; step 3
    alone holds 5 > 3 requests but the newest step always stays."""
    m = SlidingHitRate(3)
    m.observe(2, 100, 100)
    m.observe(2, 100, 0)
    assert m.hit_rate == 0.0 and m.requests == 2
    m.observe(5, 50, 25)
    assert m.hit_rate == 0.5 and len(m.window) == 1
    m.observe(0, 0, 0)  # empty steps are not appended
    assert len(m.window) == 1


def test_preempted_relookups_are_apart():
    """Six 80-token prompts wanting 5 and 60 outputs in turn in a 400-token pool (the
    5-output ones finish early, clear batch_is_full, and admission over-admits on the
    estimate): decode retracts one request, which looks up again with prompt + its outputs.
    vLLM records that lookup under preempted_* only, so the logged rate is hits / queries of
    the six first lookups; SGLang drops the re-prefill's tokens (retracted_stain) from its
    rate."""
    t = Trace("request", [TraceRequest(f"q{i}", 0.0, tuple(range(i * 1000, i * 1000 + 80)),
                                       60 if i % 2 else 5) for i in range(6)])
    r = engine_rates(t, SimConfig(capacity=400, max_prefill_tokens=10**6, policy="fcfs"))
    again = [x for x in r.vllm_lookups if x.preempted]
    assert len(again) == 1 and again[0].num_tokens > 80 and again[0].num_hits > 0
    first = [x for x in r.vllm_lookups if not x.preempted]
    assert len(first) == 6 and sum(x.num_tokens for x in first) == 480
    assert r.vllm_logged == sum(x.num_hits for x in first) / 480 == 0.0
    assert sum(s.preempted_hits for s in r.vllm_steps) == again[0].num_hits
    re_batches = [b for b in r.sglang_batches if b.reprocessed_cached]
    assert re_batches and r.sglang_overall == 0.0  # the re-prefill's hit is not counted


def test_chunks_count_their_cached_prefix_once():
    """One cold 100-token request, chunks of 32: SGLang's batches log 32, 32, 32, 4 new tokens
    and 0 cached each (add_chunked_req passes prefix_len 0): its rate is 0, not 96 / 196."""
    t = Trace("request", [TraceRequest("a", 0.0, tuple(range(100)), 2)])
    r = engine_rates(t, SimConfig(policy="fcfs", chunked_prefill_size=32))
    assert [(b.new_tokens, b.cached_tokens) for b in r.sglang_batches] == [
        (32, 0), (32, 0), (32, 0), (4, 0)]
    assert r.sglang_overall == 0.0


def test_step_stats_groups_by_step():
    s = step_stats([Lookup(1, 10, 0, False), Lookup(1, 20, 16, False), Lookup(4, 30, 16, True)])
    assert [tuple(x) for x in s] == [(2, 30, 16, 0, 0, 0), (0, 0, 0, 1, 30, 16)]


THREE = str(Path(__file__).resolve().parents[3] / "examples/traces/three_requests.jsonl.gz")


def test_rates_command(capsys):
    assert main(["rates", THREE]) == 0
    out = capsys.readouterr().out
    assert "vLLM's log, \"Prefix cache hit rate\"" in out and "SGLang's cache_hit_rate" in out
    assert main(["rates", THREE, "--window", "0"]) == 2
    assert "--window must be >= 1" in capsys.readouterr().err
