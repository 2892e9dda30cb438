"""The hit-rate explainer: every prompt token in one bucket, both caches; each bucket by a
small hand-made trace with its arithmetic; sums on every example trace and on random ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.cli import main
from radix.events import ListSink, RequestRetracted
from radix.runs.explain import BUCKETS, explain
from radix.runs.sim import SimConfig, build, run
from radix.tokens import TokenRuns
from radix.traces import Trace, TraceRequest, load_trace

TRACES = Path(__file__).resolve().parents[3] / "examples" / "traces"
UNBOUNDED = SimConfig(policy="fcfs")


def trace(*reqs) -> Trace:
    """(rid, arrival, tokens, output_len[, extra_key])"""
    return Trace("request", [TraceRequest(r[0], r[1], tuple(r[2]), r[3],
                                          extra_key=r[4] if len(r) > 4 else None) for r in reqs])


def buckets(e, rid, side="tree"):
    row = next(r for r in e.requests if r.rid == rid)
    return {k: v for k, v in getattr(row, side).items() if v}


def check_sums(e) -> None:
    for r in e.requests:
        for side in e.totals:
            assert sum(getattr(r, side).values()) == r.prompt_tokens, (r.rid, side)
            assert min(getattr(r, side).values()) >= 0
    for totals in e.totals.values():
        assert sum(totals.values()) == e.prompt_tokens
    assert e.totals["tree"]["hit"] == e.sim_totals["matched_tokens"]
    if "blocks" in e.totals:
        assert e.totals["blocks"]["hit"] == e.sim_totals["block_matched_tokens"]


def test_hit_first_seen_last_token_cap_and_block_rounding():
    """a and b: the same 40 tokens, b long after a. a: 40 first seen in both caches. b, tree:
    39 hit, 1 last-token cap (input_len - 1). b, blocks of 16: (40 - 1) // 16 = 2 blocks = 32
    hit; 40 // 16 = 2 blocks even without the cap, so the cap costs nothing and the 8 tokens of
    the partial block are block rounding. c: 32 tokens, the first 32 of a: the tree hits 31
    (cap 1); the blocks hit (32 - 1) // 16 = 1 block, and without the cap 2: the cap costs a
    whole block (16)."""
    e = explain(trace(("a", 0, range(40), 2), ("b", 5, range(40), 2), ("c", 9, range(32), 2)),
                UNBOUNDED, what_if=False)
    assert buckets(e, "a") == buckets(e, "a", "blocks") == {"first_seen": 40}
    assert buckets(e, "b") == {"hit": 39, "last_token_cap": 1}
    assert buckets(e, "b", "blocks") == {"hit": 32, "block_rounding": 8}
    assert buckets(e, "c") == {"hit": 31, "last_token_cap": 1}
    assert buckets(e, "c", "blocks") == {"hit": 16, "last_token_cap": 16}
    check_sums(e)


def test_evicted_names_the_eviction():
    """Pool of 150 tokens. a = tokens 0..99, 2 outputs: its prompt is inserted after its
    prefill (a 100-token node), its first output at finish (a 1-token leaf below): 101 slots.
    b = 100 other tokens: 49 slots are free, so the tree evicts 51 in lru order: the leaf, then
    the 100-token prompt node. c = a's prompt again: the tree matches 0 of the 99 it could have
    (evicted, by the 100-token node), 1 is the last-token cap.
    Blocks of 16: 150 // 16 = 9 blocks. a holds 7 (6 full, cached; 1 partial); freed, the queue
    is [a's partial, 2 never used, a's blocks 5, 4, 3, 2, 1, 0]. b takes 7: the 3 unhashed,
    then blocks 5, 4, 3, 2 (4 evictions). c hits blocks 0, 1 = 32 tokens; the other 96 - 32 = 64
    it could have hit were evicted; the partial 4 (100 - 96) are block rounding."""
    t = trace(("a", 0, range(100), 2), ("b", 1, range(500, 600), 2), ("c", 2, range(100), 2))
    e = explain(t, SimConfig(policy="fcfs", capacity=150), what_if=False)
    c = next(r for r in e.requests if r.rid == "c")
    assert buckets(e, "c") == {"evicted": 99, "last_token_cap": 1}
    assert buckets(e, "c", "blocks") == {"hit": 32, "evicted": 64, "block_rounding": 4}
    b_step = next(r.step for r in e.requests if r.rid == "b")
    assert c.tree_evicted_by.policy == "lru" and c.tree_evicted_by.tokens == 100
    assert c.tree_evicted_by.step == c.blocks_evicted_by.step == b_step
    assert c.blocks_evicted_by.tokens == 4 * 16
    check_sums(e)


def test_in_flight():
    """Three identical 40-token prompts at t=0, FCFS, one prefill round: the tree sees none of
    a's prompt before b and c are admitted (inserted after the forward): 40 in flight each. vLLM
    caches a block as it is allocated, so b and c hit a's 2 full blocks (32), and the partial
    block is block rounding (8)."""
    t = trace(*[(r, 0, range(40), 2) for r in "abc"])
    e = explain(t, UNBOUNDED, what_if=False)
    assert buckets(e, "b") == buckets(e, "c") == {"in_flight": 40}
    assert buckets(e, "b", "blocks") == {"hit": 32, "block_rounding": 8}
    check_sums(e)


def test_other_namespace():
    """The same 40 tokens under LoRA a, then under LoRA b: b shares no cache (its namespace
    differs), so all 40 are other namespace, in both caches (vLLM hashes the LoRA name into
    every block)."""
    e = explain(trace(("a", 0, range(40), 2, "lora-a"), ("b", 5, range(40), 2, "lora-b")),
                UNBOUNDED, what_if=False)
    assert buckets(e, "b") == buckets(e, "b", "blocks") == {"other_namespace": 40}
    without = e.what_if
    assert without == {}
    e = explain(trace(("a", 0, range(40), 2, "lora-a"), ("b", 5, range(40), 2, "lora-b")),
                UNBOUNDED, capacities=2)
    ns = {p["namespaces"]: p["tree_hit_rate"] for p in e.what_if["namespaces"]}
    assert ns == {True: 0.0, False: 39 / 80}  # b would hit 39 of the 80 prompt tokens


def test_rejected():
    """A 60-token prompt in a 50-token pool can never be admitted: rejected, all 60 tokens, in
    both caches; the 10-token request still runs."""
    e = explain(trace(("big", 0, range(60), 2), ("small", 1, range(100, 110), 2)),
                SimConfig(policy="fcfs", capacity=50), what_if=False)
    assert buckets(e, "big") == buckets(e, "big", "blocks") == {"rejected": 60}
    assert buckets(e, "small") == {"first_seen": 10}
    check_sums(e)


def test_recomputed_after_retraction_is_apart():
    """Six 80-token prompts wanting 5 and 60 outputs in turn in a 400-slot pool: the 5-output
    ones finish early, clearing batch_is_full, and admission over-admits on the estimate, so
    decode runs short and one request is retracted with k outputs. Its prompt was inserted after its
    prefill, so the tree re-matches it and recomputes the k decode tokens it freed without
    inserting; vLLM kept its full blocks cached, so the block cache recomputes only the
    partial block: (80 + k) - (80 + k - 1) // 16 * 16. Neither enters the buckets."""
    t = trace(*[(f"q{i}", 0, range(i * 1000, i * 1000 + 80), 60 if i % 2 else 5)
                for i in range(6)])
    cfg = SimConfig(capacity=400, max_prefill_tokens=10**6, policy="fcfs")
    sim = build(t, cfg)
    sim.sched.sink = ListSink()
    run(sim)
    (event,) = [x for x in sim.sched.sink.events if isinstance(x, RequestRetracted)]
    k = event.output_len
    e = explain(t, cfg, what_if=False)
    row = next(r for r in e.requests if r.rid == event.rid)
    assert row.recomputed_tree == k
    assert row.recomputed_blocks == (80 + k) - (80 + k - 1) // 16 * 16
    assert e.recomputed == {"tree": k, "blocks": row.recomputed_blocks}
    assert all(buckets(e, r.rid) == {"first_seen": 80} for r in e.requests)


@pytest.mark.parametrize("name", sorted(p.name for p in TRACES.glob("*.jsonl*")
                                        if "kv_events" not in p.name))
def test_buckets_add_up_on_every_example_trace(name):
    t = load_trace(TRACES / name)
    if name.startswith("mooncake_synthetic"):
        t.requests = t.requests[:300]
    for cfg in (SimConfig(), SimConfig(capacity=20_000, page_size=16, policy="fcfs")):
        check_sums(explain(t, cfg, what_if=False))


request = st.tuples(st.integers(0, 3), st.integers(1, 30), st.integers(0, 2),
                    st.integers(1, 40), st.floats(0, 0.05))


@settings(max_examples=60, deadline=None)
@given(st.lists(request, min_size=1, max_size=10), st.sampled_from([None, 120, 300]),
       st.sampled_from([1, 4]), st.sampled_from([None, 16]), st.sampled_from([4, 16]),
       st.booleans(), st.sampled_from(["lpm", "fcfs"]))
def test_buckets_add_up_on_random_traces(reqs, capacity, page, chunk, block, compact, policy):
    trs, arrival = [], 0.0
    for i, (shared, own, ns, out, gap) in enumerate(reqs):
        arrival += gap
        tokens = TokenRuns([(shared * 1000, 25), (50_000 + i * 100, own)])
        trs.append(TraceRequest(f"r{i}", arrival, tokens if compact else tuple(tokens), out,
                                extra_key=[None, "a", "b"][ns]))
    t = Trace("mooncake" if compact else "request", trs)
    cfg = SimConfig(capacity=capacity, page_size=page, block_size=block, policy=policy,
                    chunked_prefill_size=chunk, max_prefill_tokens=64)
    check_sums(explain(t, cfg, what_if=False))


def test_capacity_curve_page_sizes_and_top_lists():
    """The curve starts unbounded, then >= 8 capacities from the working set down to 1% of
    it; page sizes 1, 16, 64; a shared 2,000-token prefix is the top prefix."""
    t = load_trace(TRACES / "cold_burst.jsonl.gz")
    e = explain(t, SimConfig(policy="fcfs"))
    caps = [p["capacity"] for p in e.what_if["capacity"]]
    assert caps[0] is None and caps[1] == e.working_set and len(caps) >= 9
    assert caps[-1] == round(e.working_set / 100)
    assert [p["page_size"] for p in e.what_if["page_size"]] == [1, 16, 64]
    assert e.what_if["capacity"][0]["tree_hit_rate"] == pytest.approx(e.hit_rate("tree"))
    top = e.top_prefixes["tree"][0]
    assert (top.start, top.end) == (0, 2000) and top.tokens_saved == e.totals["tree"]["hit"]
    loser = e.top_losers["tree"][0]
    assert loser.tree["in_flight"] == 2000


def test_cli(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"rid": r, "arrival": a, "tokens": list(range(40)),
                                        "output_len": 2}) + "\n" for r, a in (("a", 0), ("b", 5))))
    assert main(["explain", str(path), "--no-what-if"]) == 0
    text = capsys.readouterr().out
    assert "last-token cap" in text and "block rounding" in text and "39 (48.8%)" in text
    assert main(["explain", str(path), "--json", "--capacities", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["totals"]["tree"]) == set(BUCKETS)
    assert out["requests"][1]["tree"]["hit"] == 39 and len(out["what_if"]["capacity"]) == 3
    assert main(["explain", str(TRACES / "kv_events.jsonl")]) == 2
    assert "needs a request or Mooncake trace" in capsys.readouterr().err


@settings(max_examples=30, deadline=None)
@given(st.lists(request, min_size=1, max_size=10), st.sampled_from([None, 120]),
       st.sampled_from([1, 4]), st.booleans())
def test_one_namespace_keeps_one_trie_and_explains_the_same(reqs, capacity, page, compact):
    """A trace with one namespace: the probe keeps one trie where the tries across namespaces
    would repeat it (probe.Side `single`); the explanation equals the one built with every trie
    (one_namespace patched to say no), evictions and cross-request hits included."""
    import radix.runs.probe as probe_mod

    trs, arrival = [], 0.0
    for i, (shared, own, _ns, out, gap) in enumerate(reqs):
        arrival += gap
        tokens = TokenRuns([(shared * 1000, 25), (50_000 + i * 100, own)])
        trs.append(TraceRequest(f"r{i}", arrival, tokens if compact else tuple(tokens), out))
    t = Trace("mooncake" if compact else "request", trs)
    cfg = SimConfig(capacity=capacity, page_size=page, block_size=4, policy="fcfs",
                    max_prefill_tokens=64)
    one = explain(t, cfg, what_if=False)
    real = probe_mod.one_namespace
    probe_mod.one_namespace = lambda reqs: False
    try:
        every = explain(t, cfg, what_if=False)
    finally:
        probe_mod.one_namespace = real
    assert one == every
