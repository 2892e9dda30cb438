"""A trace on a hybrid model through both engines (radix/runs/hybrid*.py): the issue's Qwen3.5
known answers per request with what decided each, the sliding window's causes, the buckets'
sum, the full-attention model equal to `compare`, compact (Mooncake) traces, the memory guard.

The per-request hits are the engines' own (tests/radix/blocks/test_hybrid_kat.py and
tests/radix/tree/test_hybrid_known_answers.py, taken from vLLM 0.33's and SGLang 0.5.23's
code); here the same figures come out of the command's runs, with their causes.
"""

from __future__ import annotations

import pytest

from radix.models import load_preset
from radix.models.engines import EngineAssumptions
from radix.runs import hybrid, memory
from radix.runs.compare import compare
from radix.runs.hybrid_compare import compare_model
from radix.runs.hybrid_explain import HYBRID_BUCKETS, explain_model
from radix.traces import Trace, TraceRequest, load_trace

QWEN = load_preset("qwen3.5-4b")
FLASHINFER, TRITON = EngineAssumptions(), EngineAssumptions(gdn_prefill_backend="triton")
NO_BUFFER = EngineAssumptions(disable_overlap_schedule=True)


def shared_unique(shared: int, unique: int, n: int) -> Trace:
    """n requests of `shared` common tokens and `unique` of their own, one output token."""
    own = [tuple(range(10**6 * (i + 1), 10**6 * (i + 1) + unique)) for i in range(n)]
    return Trace("request", [TraceRequest(f"r{i}", i, tuple(range(shared)) + own[i], 1)
                             for i in range(n)])


@pytest.mark.parametrize("shared, unique, a, engine, later, decided", [
    # vLLM, block 576: r1 pins the junction at 2 blocks; from r2 on the state there decides
    (1600, 600, FLASHINFER, "vllm", 1152, "Mamba state cached at token 1,152 (the end of "
                                          "block 2 of 576"),
    (1500, 700, FLASHINFER, "vllm", 1152, "(the end of block 2 of 576"),
    (480, 100, FLASHINFER, "vllm", 0, "480 reusable tokens fill no 576-token block"),
    # vLLM, block 528 (Triton GDN): 3 x 528 and 2 x 528
    (1600, 600, TRITON, "vllm", 1584, "(the end of block 3 of 528"),
    (1500, 700, TRITON, "vllm", 1056, "(the end of block 2 of 528"),
    (480, 100, TRITON, "vllm", 0, "480 reusable tokens fill no 528-token block"),
    # SGLang, extra_buffer: r1 keeps a state at its branching seqlen (the 64-token grid below)
    (1600, 600, FLASHINFER, "sglang", 1600, "hit 1,600 at the node ending at token 1,600"),
    (1500, 700, FLASHINFER, "sglang", 1472, "states are kept on its 64-token checkpoint grid"),
    (480, 100, FLASHINFER, "sglang", 448, "hit 448 at the node ending at token 448"),
    # SGLang, no_buffer (the overlap scheduler off): a state only where each request ends
    (1600, 600, NO_BUFFER, "sglang", 0, "no_buffer keeps a state only where"),
    (480, 100, NO_BUFFER, "sglang", 0, "no_buffer keeps a state only where"),
])
def test_qwen35_known_answers_and_what_decided_each(shared, unique, a, engine, later, decided):
    """64 requests. 0 and 1 hit 0 everywhere: 0 is first; for 1 attention matches (vLLM: the
    whole blocks of the shared part; SGLang: all of it) but no Mamba state lies there, and it
    keeps one (vLLM: the junction, num_uncached_common_prefix_tokens; SGLang:
    mamba_branching_seqlen). From request 2 on every request hits `later`, decided by it."""
    e = explain_model(shared_unique(shared, unique, 64), QWEN, a)
    side = e["engines"][engine]
    rows = side["rows"]
    assert [r.outcome.hit for r in rows] == [0, 0] + [later] * 62
    for r in rows:
        assert sum(r.buckets.values()) == shared + unique
    if later:
        assert "no Mamba state is cached between 0 and" in rows[1].decided
        assert rows[1].buckets["mamba_checkpoint"] == rows[1].outcome.attention_hit > 0
        keeps = "pins the junction at" if engine == "vllm" else "mamba_branching_seqlen"
        assert f"{keeps} {later:,}" in rows[1].decided
    assert all(decided in r.decided for r in rows[2:])
    assert e["prompt_tokens"] == 64 * (shared + unique)
    totals = side["totals"]
    assert sum(totals.values()) == 64 * (shared + unique)
    assert totals["hit"] == 62 * later


def test_the_sliding_window_cause_on_gpt_oss():
    """gpt-oss-20b (window 128). A: a 1,000-token prompt, 400 output tokens; B and C share its
    first 500 tokens. SGLang: A's decode freed the SWA KV behind its window (every 128 tokens),
    so B's match at 500 ends in a tombstone: 0, outside the window; B's insert recovers the
    window before its branch point, so C hits all 500. vLLM: with retention 0 a window's blocks
    are cached only before a prompt's end (A's: 1,000) or a junction: B's attention matches 496
    (31 blocks), the window group nothing: 0; B pins the junction at 496, C hits it."""
    p = tuple(range(1000))
    trace = Trace("request", [TraceRequest("A", 0, p, 400),
                              TraceRequest("B", 1, p[:500] + tuple(range(-100, 0)), 1),
                              TraceRequest("C", 2, p[:500] + tuple(range(-200, -100)), 1)])
    e = explain_model(trace, load_preset("gpt-oss-20b"))["engines"]
    sg, vl = e["sglang"]["rows"], e["vllm"]["rows"]
    assert [r.outcome.hit for r in sg] == [0, 0, 500]
    assert [r.outcome.hit for r in vl] == [0, 0, 496]
    assert sg[1].buckets["sliding_window"] == 500 and "tombstoned" in sg[1].decided
    assert vl[1].buckets["sliding_window"] == 496 and vl[1].outcome.junction == 496
    assert "no window of blocks is cached" in vl[1].decided


def test_buckets_add_up_on_every_preset():
    """Each preset, both engines, a multi-turn trace whose turns contain the earlier replies:
    every request's buckets add up to its prompt, and the hit never passes attention's."""
    trace = load_trace("examples/traces/multi_turn.jsonl.gz")
    for name in ("qwen3.5-4b", "qwen3-next-80b-a3b", "gpt-oss-20b", "gemma-3-27b",
                 "nemotron-h-8b", "llama-3-8b"):
        e = explain_model(trace, load_preset(name), EngineAssumptions(kv_memory_bytes=None))
        for engine, side in e["engines"].items():
            for r in side["rows"]:
                assert set(r.buckets) == set(HYBRID_BUCKETS)
                assert sum(r.buckets.values()) == r.outcome.prompt_tokens, (name, engine, r)
                assert min(r.buckets.values()) >= 0
                assert r.outcome.hit <= r.outcome.attention_hit
            assert side["totals"]["hit"] == side["run"]["hit_tokens"]


def test_a_full_attention_model_gives_compares_answer():
    """Llama-3-8B (full attention only) through the component tree and the hybrid coordinator
    hits what `compare`'s RadixCache and BlockCacheManager hit, unbounded."""
    trace = load_trace("examples/traces/customer_support.jsonl.gz")
    plain = compare(trace)
    ours = compare_model(trace, load_preset("llama-3-8b"), EngineAssumptions(kv_memory_bytes=None))
    assert ours["sglang"]["hit_tokens"] == plain["tree"]["hit_tokens"]
    assert ours["vllm"]["hit_tokens"] == plain["blocks"]["hit_tokens"]


def test_a_mooncake_trace_stays_compact_and_adds_up():
    """Hash-id prompts (512-token blocks) run as runs of ids on both engines; the buckets add
    up; Qwen3.5's hit is at most what full attention alone hits."""
    whole = load_trace("examples/traces/mooncake_excerpt.jsonl")
    trace = Trace(whole.format, whole.requests[:60], input_lens=whole.input_lens[:60])
    e = explain_model(trace, QWEN)
    for side in e["engines"].values():
        assert sum(side["totals"].values()) == e["prompt_tokens"]
        run = side["run"]
        assert 0 < run["hit_tokens"] <= run["attention_hit_tokens"]


def test_a_run_past_the_memory_budget_is_refused():
    """Unbounded, vLLM preallocates a block for every block the trace would allocate (3
    requests x (ceil(121 / 16) + 2 = 10) blocks, one group, and the null block: 31): past the
    budget (a process and the blocks' estimate) the run is refused with the figure, before
    either engine runs; within it, it runs."""
    budget = memory.PROCESS_BYTES + 31 * hybrid.BYTES_PER_BLOCK
    unbounded = EngineAssumptions(kv_memory_bytes=None)
    with pytest.raises(MemoryError, match="vLLM's 31 blocks of 16 tokens would take"):
        compare_model(shared_unique(100, 20, 3), load_preset("llama-3-8b"), unbounded,
                      budget=budget - 1)
    out = compare_model(shared_unique(100, 20, 3), load_preset("llama-3-8b"), unbounded,
                        budget=budget)
    assert out["vllm"]["pools"]["num_blocks"] == 31
