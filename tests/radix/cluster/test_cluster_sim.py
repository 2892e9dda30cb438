"""The simulated cluster: one replica is `simulate`, round robin's per-replica hits are a
brute-force count, prefix-aware routers keep a conversation together, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radix.cli import main
from radix.cluster import ROUTERS
from radix.cluster.sim import simulate_cluster
from radix.runs.sim import SimConfig, simulate
from radix.traces import Trace, TraceRequest, load_trace

EXAMPLES = Path(__file__).resolve().parents[3] / "examples/traces"


@pytest.fixture(scope="module")
def mooncake60():
    t = load_trace(EXAMPLES / "mooncake_excerpt.jsonl")
    return Trace(t.format, t.requests[:60], t.token_scale, t.input_lens[:60], source=t.source)


@pytest.mark.parametrize("capacity", [None, 200_000])
def test_one_replica_is_simulate_for_every_router(mooncake60, capacity):
    """With one replica every router must send everything to replica 0, and the loop must
    step the scheduler exactly as `simulate` does: the totals (and every request's row) are
    the same bytes, bounded pool (evictions, retractions) included."""
    cfg = SimConfig(capacity=capacity)
    single = simulate(mooncake60, cfg)
    want = json.dumps(single.totals, sort_keys=True)
    for router in ROUTERS:
        got = simulate_cluster(mooncake60, 1, router, cfg)
        assert json.dumps({k: got.totals[k] for k in single.totals}, sort_keys=True) == want
        assert got.per_replica[0]["hit_rate"] == single.totals["hit_rate"]
    if capacity is not None:
        assert single.totals["evicted_tokens"] > 0  # the bounded case does evict


def test_one_replica_cli_matches_simulate_cli(capsys):
    path = str(EXAMPLES / "customer_support.jsonl.gz")
    assert main(["simulate", path, "--json", "--policy", "lpm"]) == 0
    single = json.loads(capsys.readouterr().out)["totals"]
    assert main(["cluster", path, "--replicas", "1", "--router", "all", "--json"]) == 0
    for r in json.loads(capsys.readouterr().out):
        assert {k: r["totals"][k] for k in single} == single, r["router"]


def spaced_trace():
    """Three conversations of three turns and a shared 40-token system prompt; each turn
    extends its previous prompt; arrivals 100 s apart, so each request finishes (and is in
    its replica's tree) before the next arrives."""
    system = tuple(range(1, 41))
    reqs, t = [], 0.0
    for turn in range(3):
        for conv in range(3):
            own = tuple(1000 * (conv + 1) + j for j in range(20 * (turn + 1)))
            reqs.append(TraceRequest(f"c{conv}-t{turn}", t, system + own, 4))
            t += 100.0
    return Trace("request", reqs)


def brute_force_matched(prompts: list[tuple[int, ...]]) -> list[int]:
    """Per request, in order: the longest common prefix with any earlier prompt on the same
    replica (their outputs are unique ids, so a match never runs into them), capped at the
    prompt's length - 1 (one token must be computed for the first output)."""
    out = []
    for i, p in enumerate(prompts):
        best = 0
        for q in prompts[:i]:
            n = 0
            while n < min(len(p), len(q)) and p[n] == q[n]:
                n += 1
            best = max(best, n)
        out.append(min(best, len(p) - 1))
    return out


@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_round_robin_hits_equal_a_brute_force_count(replicas):
    trace = spaced_trace()
    res = simulate_cluster(trace, replicas, "round-robin", SimConfig(), keep_decisions=True)
    by_rid = {r.rid: r.token_ids for r in trace.requests}
    for rank in range(replicas):
        prompts = [by_rid[rid] for rid, k, _ in res.decisions if k == rank]
        matched = sum(brute_force_matched(prompts))
        total = sum(len(p) for p in prompts)
        assert res.per_replica[rank]["matched_tokens"] == matched
        assert res.per_replica[rank]["hit_rate"] == pytest.approx(matched / max(total, 1))


def test_prefix_routers_keep_conversations_together():
    """On the spaced conversations with 2 replicas round robin sends request k to replica
    k % 2, which splits every conversation's turns (9 requests, 3 a turn); the prefix-aware
    routers and the session router keep them together and reach a higher hit rate."""
    trace = spaced_trace()
    rr = simulate_cluster(trace, 2, "round-robin", SimConfig()).totals["hit_rate"]
    for router in ("cache-aware", "kv-overlap", "prefix-affinity", "session"):
        assert simulate_cluster(trace, 2, router, SimConfig()).totals["hit_rate"] > rr, router


def test_cluster_cli_table_and_errors(capsys):
    path = str(EXAMPLES / "multi_turn.jsonl.gz")
    assert main(["cluster", path, "--replicas", "1,2", "--router", "round-robin,cache-aware"]) == 0
    out = capsys.readouterr().out
    assert "cache-aware" in out and "derived, not measured" in out
    with pytest.raises(SystemExit):
        main(["cluster", path, "--replicas", "0"])
    assert "--replicas must all be >= 1" in capsys.readouterr().err
    assert main(["cluster", path, "--route-block", "0"]) == 2
    assert "--route-block must be >= 1" in capsys.readouterr().err
    assert main(["cluster", str(EXAMPLES / "kv_events.jsonl")]) == 2
    assert "needs a request or Mooncake trace" in capsys.readouterr().err
