"""compare, configs, simulate, explain and the Trace debugger agree on the same trace and
settings: on a hand-made duplicate trace (identical figures) and on the Mooncake excerpt
(request by request, once the simulator's in-flight tokens are accounted for)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radix.cli import main
from radix.runs.compare import compare, output_tokens, run_blocks, run_tree, trace_reqs
from radix.runs.explain import explain
from radix.runs.sim import CONFIGS, SimConfig, simulate
from radix.traces import load_trace
from scenarios.trace import replay

EXCERPT = Path(__file__).resolve().parents[3] / "examples" / "traces" / "mooncake_excerpt.jsonl"
UNBOUNDED = 10**9


def duplicates(tmp_path) -> Path:
    """A 3-block request (1,100 tokens), the same again, its first 2 blocks, the same again,
    one minute apart (nothing in flight): Mooncake format."""
    ids = [[1, 2, 3], [1, 2, 3], [1, 2], [1, 2]]
    lengths = [1100, 1100, 1024, 1024]
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 60_000 * k, "input_length": n,
                                        "output_length": 5, "hash_ids": h}) + "\n"
                            for k, (h, n) in enumerate(zip(ids, lengths))))
    return path


def cli_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_duplicate_trace_same_figures_everywhere(tmp_path, capsys):
    """Tree: 1,099 + 1,023 + 1,023 = 3,145 hit tokens (each repeat matches its prompt - 1);
    blocks of 16: 68 + 63 + 63 blocks = 1,088 + 1,008 + 1,008 = 3,104. compare (one at a time),
    simulate and configs (FCFS + LRU + page 1) and explain all say so."""
    path = duplicates(tmp_path)
    c = cli_json(capsys, "compare", str(path), "--capacity", str(UNBOUNDED))
    assert (c["tree"]["hit_tokens"], c["blocks"]["hit_tokens"]) == (3_145, 3_104)
    s = cli_json(capsys, "simulate", str(path), "--policy", "fcfs")["totals"]
    assert (s["matched_tokens"], s["block_matched_tokens"]) == (3_145, 3_104)
    configs = cli_json(capsys, "configs", str(path))
    assert configs["fcfs+lru+page1"] == s
    assert configs["lpm+slru"]["matched_tokens"] == 3_145
    assert configs["no-cache"]["matched_tokens"] == configs["no-cache"]["block_matched_tokens"] == 0
    e = explain(load_trace(path), SimConfig(policy="fcfs"), what_if=False)
    assert (e.totals["tree"]["hit"], e.totals["blocks"]["hit"]) == (3_145, 3_104)
    assert e.totals["tree"]["last_token_cap"] == 3 and e.totals["tree"]["in_flight"] == 0
    page = replay(path.read_bytes(), path.name, capacity=UNBOUNDED)  # the Trace debugger's run
    assert (page.stats["tree"]["hit_tokens"], page.stats["blocks"]["hit_tokens"]) == (3_145, 3_104)
    assert page.stats["tree"]["prompt_tokens"] == c["tree"]["prompt_tokens"] == 4_248


def test_trace_debugger_equals_compare_on_the_excerpt():
    """The page's replay (its own event log and block keyframes) and compare: the same hits,
    prefills and evictions for both caches, at a capacity that evicts."""
    page = replay(EXCERPT.read_bytes(), EXCERPT.name, capacity=400_000)
    c = compare(load_trace(EXCERPT), 400_000)
    for cache in ("tree", "blocks"):
        for figure in ("requests", "rejected", "prompt_tokens", "hit_tokens", "evicted_tokens"):
            assert page.stats[cache][figure] == c[cache][figure], (cache, figure)
    assert c["tree"]["evicted_tokens"] > 0


def test_configs_is_simulate_for_each_configuration(tmp_path, capsys):
    """The excerpt's first 100 requests at a capacity that evicts."""
    path = tmp_path / "head.jsonl"
    path.write_text("".join(EXCERPT.read_text().splitlines(keepends=True)[:100]))
    trace = load_trace(path)
    out = cli_json(capsys, "configs", str(path), "--capacity", "400000")
    for name, over in CONFIGS:
        assert out[name] == json.loads(json.dumps(
            simulate(trace, SimConfig(capacity=400_000, **over)).totals)), name


@pytest.mark.parametrize("path", [EXCERPT, EXCERPT.parent / "cold_burst.jsonl.gz"])
def test_compare_equals_the_simulator_once_in_flight_is_counted(path):
    """Unbounded, FCFS: one at a time (compare), a request hits its longest common prefix with
    the earlier ones, capped at its length - 1 (blocks: in whole blocks). In the simulator's
    timeline the same prefix is hit, evicted (never, unbounded), capped, rounded or still in
    flight: so compare's hit = min(those buckets' sum, n - 1), in blocks for the block cache,
    request by request. The cold burst (64 requests at t=0 sharing 2,000 tokens, 8 a round)
    has in-flight tokens; the excerpt has none."""
    trace = load_trace(path)
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    tree_hits, block_hits = {}, {}
    run_tree(trace_reqs(trace), outputs, UNBOUNDED, 1,
             on_match=lambda r, m: tree_hits.setdefault(r.rid, m))
    run_blocks(trace_reqs(trace), outputs, UNBOUNDED, 16,
               on_lookup=lambda r, h: block_hits.setdefault(r.rid, h.num_computed_tokens))
    e = explain(trace, SimConfig(policy="fcfs"), what_if=False)
    assert (e.totals["tree"]["in_flight"] > 0) == ("burst" in path.name)
    for r in e.requests:
        n = r.prompt_tokens
        seen = {s: n - b["other_namespace"] - b["first_seen"] - b["rejected"]
                for s, b in (("tree", r.tree), ("blocks", r.blocks))}
        assert tree_hits[r.rid] == min(seen["tree"], n - 1), r.rid
        assert block_hits[r.rid] == min(seen["blocks"], n - 1) // 16 * 16, r.rid
    c = compare(trace, UNBOUNDED)
    assert c["tree"]["hit_tokens"] == sum(tree_hits.values())
    assert c["blocks"]["hit_tokens"] == sum(block_hits.values())
