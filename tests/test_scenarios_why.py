"""scenarios/why.py: two requests of a trace compared (tree sentence, block rows, the first
block whose hash differs) and the causes listed for the explainer panel."""

from __future__ import annotations

from radix.traces import Trace, TraceRequest
from scenarios.why import causes, compare


def trace(*reqs) -> Trace:
    return Trace("request", [TraceRequest(rid, float(i), tuple(ids), 2, cache_salt=salt)
                             for i, (rid, ids, salt) in enumerate(reqs)])


def test_first_bad_block_and_tree_branch():
    """a, b share 40 tokens, blocks of 16: blocks 0 and 1 hash alike; block 2 (tokens [32, 48))
    holds token 40, the first that differs."""
    t = trace(("a", range(60), None), ("b", [*range(40), *range(900, 920)], None))
    v = compare(t, "a", "b")
    assert v.first_bad_block == 2 and [r["same hash as A's"] for r in v.block_rows] == [
        True, True, False]
    assert "follows A's path for 40 tokens" in v.tree_sentence
    assert v.block_sentence.startswith("Block 2 (tokens [32, 48)) is the first")


def test_partial_last_block_and_namespace():
    """b = a's 20 tokens: one full block (hashes alike), 4 tokens in no block; vLLM reuses 16."""
    t = trace(("a", range(20), None), ("b", range(20), None), ("c", range(20), "t2"))
    v = compare(t, "a", "b")
    assert v.first_bad_block is None and "its last 4 tokens fill no block" in v.block_sentence
    w = compare(t, "a", "c")
    assert w.first_bad_block == 0 and "different namespaces" in w.tree_sentence


def test_causes_finds_the_block_floor_and_skips_unrelated():
    """b shares 10 tokens with a (< one block of 16): the floor; c shares nothing: left out."""
    t = trace(("a", range(30), None), ("b", [*range(10), *range(500, 520)], None),
              ("c", range(700, 720), None))
    (found,) = causes(t, ["b", "c"])
    assert (found.rid, found.partner, found.shared, found.kinds) == ("b", "a", 10,
                                                                      ["block_floor"])
