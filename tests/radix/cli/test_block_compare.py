"""`python -m radix compare`: the tree and the block cache side by side (radix/cli/compare.py)."""

from __future__ import annotations

import json

import pytest

from radix.cli import main


def write_trace(path, requests):
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return str(path)


def run_json(capsys, *argv) -> dict:
    assert main(["compare", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_three_requests(tmp_path, capsys):
    """R1 = S+F+96, R2 = S+F+80, R3 = S+2,112 (S 512, F 1,543 tokens). Tree: R2 matches 2,055,
    R3 512 -> 2,567 hit tokens; blocks: R2 2,048 (128 full blocks), R3 512 -> 2,560.
    Prompt tokens 2,151 + 2,135 + 2,624 = 6,910."""
    s, f = list(range(512)), list(range(1000, 2543))
    reqs = [{"rid": "r1", "arrival": 0, "tokens": s + f + list(range(5000, 5096)), "output_len": 8},
            {"rid": "r2", "arrival": 1, "tokens": s + f + list(range(6000, 6080)), "output_len": 8},
            {"rid": "r3", "arrival": 2, "tokens": s + list(range(7000, 9112)), "output_len": 8}]
    out = run_json(capsys, write_trace(tmp_path / "t.jsonl", reqs), "--capacity", "16384")
    assert out["tree"]["hit_tokens"] == 2567 and out["blocks"]["hit_tokens"] == 2560
    assert out["tree"]["prefilled_tokens"] == 6910 - 2567
    assert out["blocks"]["prefilled_tokens"] == 6910 - 2560


def test_small_capacity_evictions(tmp_path, capsys):
    """capacity 8 tokens, block_size 4 (2 blocks). A = B = tokens 1..6, C = 9..14, output 1.
    B: the tree matches 5 (cap 6 - 1), the blocks 4 (cap 5 tokens -> 1 block).
    B's match split the tree's node at 5 (split-on-read): [1..5] -> [6]. C needs 6 slots: the
    tree has 2 free and evicts leaf [6], then its parent [1..5] (2 nodes); the pool's queue is
    [2 (B's partial block, front), 1 (hashed)], so C pops both and evicts 1 hash (4 tokens)."""
    reqs = [{"rid": r, "arrival": i, "tokens": t, "output_len": 1}
            for i, (r, t) in enumerate([("a", [1, 2, 3, 4, 5, 6]), ("b", [1, 2, 3, 4, 5, 6]),
                                        ("c", list(range(9, 15)))])]
    out = run_json(capsys, write_trace(tmp_path / "t.jsonl", reqs), "--capacity", "8",
                   "--block-size", "4")
    tree, blocks = out["tree"], out["blocks"]
    assert (tree["hit_tokens"], tree["evictions"], tree["evicted_tokens"]) == (5, 2, 6)
    assert (blocks["hit_tokens"], blocks["evictions"], blocks["evicted_tokens"]) == (4, 1, 4)
    assert blocks["unreachable_blocks"] == 0 and tree["rejected"] == blocks["rejected"] == 0


def test_table_and_bad_input(tmp_path, capsys):
    path = write_trace(tmp_path / "t.jsonl", [{"rid": "a", "arrival": 0, "tokens": [1, 2, 3],
                                               "output_len": 2}])
    assert main(["compare", path, "--capacity", "64"]) == 0
    table = capsys.readouterr().out
    assert "hit rate" in table and "block cache" in table
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"rid": "a", "arrival": 0, "tokens": [1, 2], "output_len": 1}\n'
                   '{"rid": "b", "arrival": 1, "tokens": "oops", "output_len": 1}\n')
    assert main(["compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "tokens" in err
    with pytest.raises(SystemExit):
        main(["compare"])
