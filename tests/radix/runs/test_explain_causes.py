"""The explainer's cause buckets on crafted traces, exact token counts (issue 22): the block
floor, the last token / aligned last block, namespaces. Derivations in the docstrings."""

from __future__ import annotations

import json

from radix.cli import main
from radix.runs.explain import explain
from radix.runs.sim import SimConfig
from radix.traces import Trace, TraceRequest

SHARED = tuple(range(5000, 5240))  # 240 tokens


def buckets(e, rid, side):
    row = next(r for r in e.requests if r.rid == rid)
    return {k: v for k, v in getattr(row, side).items() if v}


def floor_trace() -> Trace:
    return Trace("request", [TraceRequest("a", 0.0, SHARED + tuple(range(100, 160)), 2),
                             TraceRequest("b", 9.0, SHARED + tuple(range(200, 260)), 2)])


def test_block_floor_240_of_784():
    """b shares a's 240-token prefix. The tree (page 1) hits all 240; blocks of 784 hold no
    whole block of it (240 // 784 = 0), so vLLM hits 0 and the 240 are the block floor; b's
    other 60 tokens are first seen. a: 300 first seen on both sides."""
    e = explain(floor_trace(), SimConfig(policy="fcfs", block_size=784), what_if=False)
    assert buckets(e, "b", "tree") == {"hit": 240, "first_seen": 60}
    assert buckets(e, "b", "blocks") == {"block_floor": 240, "first_seen": 60}
    assert e.totals["blocks"]["block_floor"] == 240 and e.totals["blocks"]["hit"] == 0
    assert e.totals["tree"]["block_floor"] == 0


def test_block_floor_is_not_rounding_past_a_whole_block():
    """Blocks of 16: 240 = 15 whole blocks, so b hits 240 in vLLM too; with blocks of 100 it
    hits 200 and the 40 past the second block are block rounding, not floor."""
    e = explain(floor_trace(), SimConfig(policy="fcfs", block_size=100), what_if=False)
    assert buckets(e, "b", "blocks") == {"hit": 200, "block_rounding": 40, "first_seen": 60}


def test_last_token_and_aligned_block_recomputed():
    """The same 32-token prompt twice, blocks of 16: the tree reuses 31 and recomputes the last
    token; vLLM caps at (32 - 1) // 16 = 1 block and recomputes the whole aligned block: 16."""
    p = tuple(range(32))
    t = Trace("request", [TraceRequest("a", 0.0, p, 2), TraceRequest("b", 9.0, p, 2)])
    e = explain(t, SimConfig(policy="fcfs"), what_if=False)
    assert buckets(e, "b", "tree") == {"hit": 31, "last_token_cap": 1}
    assert buckets(e, "b", "blocks") == {"hit": 16, "last_token_cap": 16}


def test_kept_apart_by_namespace():
    """The same 50 tokens under two cache_salts: b reuses nothing; all 50 are other-namespace
    in both caches (the tree keys children by namespace; vLLM salts the first block hash)."""
    p = tuple(range(50))
    t = Trace("request", [TraceRequest("a", 0.0, p, 2, cache_salt="t1"),
                          TraceRequest("b", 9.0, p, 2, cache_salt="t2")])
    e = explain(t, SimConfig(policy="fcfs"), what_if=False)
    assert buckets(e, "b", "tree") == buckets(e, "b", "blocks") == {"other_namespace": 50}


def test_cli_prints_the_floor_row(tmp_path, capsys):
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"rid": r, "arrival": t, "output_len": 2,
                                     "tokens": list(SHARED + (x,) * 60)}) + "\n"
                         for r, t, x in (("a", 0, 1), ("b", 9, 2))))
    assert main(["explain", str(f), "--block-size", "784", "--no-what-if", "--policy",
                 "fcfs"]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("block floor"))
    assert row.split()[-2:] == ["240", "(40.0%)"]  # 240 of 600 prompt tokens, block cache
