"""scenarios/why.py: two requests of a trace compared (tree sentence, block rows, the first
block whose hash differs) and the causes listed for the explainer panel; scenarios/whyhash.py:
two Mooncake requests compared by hash ids."""

from __future__ import annotations

import json

import pytest

from radix.traces import Trace, TraceRequest
from radix.traces.mooncake import load_mooncake
from scenarios.why import causes, compare
from scenarios.whyhash import compare_hash_ids


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


MOONCAKE = "".join(json.dumps({"timestamp": i, "input_length": n, "output_length": 2,
                               "hash_ids": ids}) + "\n"
                   for i, (n, ids) in enumerate([(1536, [1, 2, 3]), (1800, [1, 2, 9, 10]),
                                                 (1000, [1, 2])]))


def test_mooncake_pair_parts_at_the_first_hash_id_that_differs():
    """mc-1 = ids [1, 2, 3] (1,536 tokens), mc-2 = [1, 2, 9, 10] (1,800): block 2 is the first
    whose id differs (3 vs 9), shared 2 x 512 = 1,024 tokens; the tree and vLLM (blocks of 16:
    1,024 = 64 blocks, and B's last token 1,799 lies past them) both reuse 1,024, so vLLM
    prefills 1,800 - 1,024 = 776."""
    v = compare_hash_ids(load_mooncake(MOONCAKE), "mc-1", "mc-2")
    assert (v.first, v.shared, v.report.tree.hit, v.report.blocks.hit) == (2, 1024, 1024, 1024)
    assert [r["same id"] for r in v.rows] == [True, True, False, False]
    assert (v.rows[3]["A's id"], v.rows[3]["B's id"], v.rows[3]["tokens"]) == (
        None, 10, "[1,536, 1,800)")
    assert v.sentence.startswith("Block 2 (tokens [1,024, 1,536)) is the first whose hash id "
                                 "differs: A has id 3, B has 9")
    assert "776 are prefilled again there" in v.sentence


def test_mooncake_pair_inside_and_past():
    """mc-3 = ids [1, 2], 1,000 tokens, inside mc-1's path: no id differs; the tree reuses
    1,000 - 1 = 999 (the last token is computed), vLLM 999 // 16 x 16 = 992. mc-1 after mc-3
    goes on past mc-3's end: the tree reuses all 1,000 shared tokens, vLLM 992 (mc-3's last
    8 tokens, 992..999, fill no block, so they were never hashed)."""
    t = load_mooncake(MOONCAKE)
    v = compare_hash_ids(t, "mc-1", "mc-3")
    assert (v.first, v.report.tree.hit, v.report.blocks.hit) == (None, 999, 992)
    assert v.sentence.startswith("Every hash id of B is A's: B's 2 blocks start A's 3")
    w = compare_hash_ids(t, "mc-3", "mc-1")
    assert (w.first, w.report.tree.hit, w.report.blocks.hit) == (None, 1000, 992)
    assert "B goes on past A's end (1,000 tokens)" in w.sentence
    with pytest.raises(ValueError, match="no request 'mc-9'"):
        compare_hash_ids(t, "mc-1", "mc-9")


def test_live_comparison_heads_each_prompt_once():
    """The Live page's why panel (scenarios/why.py compare_live, here over the simulated
    engine's character tokenizer): the report heads the prompts "A: typed (29 tokens)" and
    "B: <rid>", not "A: A: typed" (issue 41 item 9)."""
    from scenarios.classroom import SimLoaded
    from scenarios.why import compare_live

    tok = SimLoaded().tokenizer
    typed = [{"role": "user", "content": "hello there"}]
    ran = type("Req", (), {"rid": "you.2", "token_ids": tuple(tok.encode("hello where"))})()
    head = compare_live(tok, typed, ran).text.splitlines()[:2]
    assert head[0] == "A: typed (29 tokens)" and head[1].startswith("B: you.2 (")
