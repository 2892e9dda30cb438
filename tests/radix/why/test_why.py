"""`why` without a tokenizer: inputs and their errors, the two caches' answers against the rules
(an oracle), the report, and both command lines (`python -m radix why` on token ids, `python -m
engine why` on text, in-process)."""

from __future__ import annotations

import json
import random
import shlex

import pytest

from radix.cli import main as radix_main
from radix.why.caches import block_outcome, tree_outcome
from radix.why.inputs import read_prompt
from radix.why.prompt import Prompt
from radix.why.report import format_why, why


def test_block_floor_240_tokens_blocks_of_784():
    """240 shared tokens, blocks of 784: 240 // 784 = 0 whole blocks, so vLLM hits 0 and the
    tree (page 1) 240; all 240 are the block floor."""
    shared = list(range(1000, 1240))
    r = why(Prompt("a", tuple(shared + [1, 2, 3])), Prompt("b", tuple(shared + [7, 8, 9])),
            block_size=784)
    assert (r.diff.common, r.tree.hit, r.blocks.hit, r.blocks.lost_to_unit) == (240, 240, 0, 240)
    assert r.blocks.prefilled == 243 and r.tree.prefilled == 3
    assert "the block floor: the 240 shared tokens fill no whole block" in format_why(r)
    one = why(Prompt("a", (5, 1)), Prompt("b", (5, 2)), block_size=16)
    assert "the block floor: the 1 shared token fills no whole block" in format_why(one)


def test_last_token_rule_and_aligned_block():
    """B = A, 32 tokens, blocks of 16: the tree reuses 31 (one token must be computed); vLLM
    caps at (32 - 1) // 16 = 1 block, so the whole aligned last block (16) is recomputed."""
    a = tuple(range(32))
    r = why(Prompt("a", a), Prompt("b", a), block_size=16)
    assert r.diff.identical and (r.tree.hit, r.blocks.hit) == (31, 16)
    assert (r.tree.lost_to_last_token, r.blocks.lost_to_last_token) == (1, 16)
    assert r.blocks.reason == "cap"


@pytest.mark.parametrize("seed", range(20))
def test_caches_agree_with_the_rules(seed):
    """Oracle: on random pairs the real caches hit min(shared, len(B) - 1) rounded down to the
    unit (the caches raise if not: caches._outcome), and shared is the brute-force prefix."""
    rng = random.Random(seed)
    a = [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
    k = rng.randrange(len(a) + 1)
    b = a[:k] + [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
    unit = rng.choice([1, 2, 4, 16])
    shared = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    t, blk = tree_outcome(a, b, page_size=unit), block_outcome(a, b, block_size=unit)
    assert t.shared == blk.shared == shared
    assert t.hit == blk.hit == min(shared, len(b) - 1) // unit * unit
    assert t.hit + t.prefilled == len(b)


def test_radix_why_on_token_ids(capsys, tmp_path):
    f = tmp_path / "b.json"
    f.write_text(json.dumps({"token_ids": [1, 2, 3, 4, 5, 9, 9], "cache_salt": "t2"}))
    assert radix_main(["why", "[1, 2, 3, 4, 5, 6]", str(f), "--block-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "part at token 5" in out and "[#5] || [#9]" in out
    assert "kept apart by namespace: cache_salt None vs 't2'" in out
    assert "reuses 0 of 7" in out


def test_radix_why_json_and_trace_rids(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"rid": r, "arrival": 0, "output_len": 1,
                                           "tokens": ids}) for r, ids in
                               (("r1", list(range(40))), ("r2", list(range(20)) + [99] * 5))))
    assert radix_main(["why", "r1", "r2", "--trace", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["common_tokens"] == 20 and out["tree"]["hit"] == 20 and out["blocks"]["hit"] == 16
    assert out["causes"] == []


@pytest.mark.parametrize("spec, words", [
    ("missing.txt", "missing.txt: no such file"),
    ('{"token_ids": [1, "x"]}', 'field "token_ids"[1]: expected an int >= 0'),
    ('{"token_ids": [1], "text": "hi"}', "give exactly one of"),
    ('{"messages": [{"role": "user"}]}', 'field "messages"[0].content: expected a string'),
    ('{"token_ids": [1], "cache_salt": 5}', 'field "cache_salt": expected a string'),
    ('[1, 2', "not valid JSON"),
])
def test_bad_input_names_the_field(capsys, spec, words):
    assert radix_main(["why", spec, "[1, 2]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "Traceback" not in err


def test_text_without_a_tokenizer_points_to_the_engine(capsys, tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("hello")
    assert radix_main(["why", str(f), "[1]"]) == 2
    assert "run `python -m engine why`" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        read_prompt('{"messages": [{"role": "user", "content": "hi"}]}')


def test_engine_why_on_text_files(capsys, tmp_path):
    """The engine's command tokenizes text files with the default model's tokenizer."""
    from engine.__main__ import main as engine_main
    fa, fb = tmp_path / "a.txt", tmp_path / "b.txt"
    fa.write_text("You are helpful.\nDate: 2026-12-01\nUser: hi")
    fb.write_text("You are helpful.\nDate: 2026-12-02\nUser: hi")
    assert engine_main(["why", str(fa), str(fb)]) == 0
    out = capsys.readouterr().out
    assert "A has '2026-12-01', B has '2026-12-02'" in out
    assert "[User][:][ hi]" in out  # the tokens, decoded
    assert engine_main(["why", str(fa), str(fb), "--tokenizer", str(tmp_path)]) == 2
    assert "not a folder with tokenizer files" in capsys.readouterr().err


def test_the_readmes_engine_why_line(capsys, monkeypatch):
    """The README's `python -m engine why examples/why/date_a.txt examples/why/date_b.txt`, run
    here with the tokenizer loaded (tools/readme_commands.py --quick leaves it to this file):
    exit 0, and the output is the README's transcript of it, line for line."""
    from readmehelp import ROOT, left_to

    from engine.__main__ import main as engine_main
    (words,) = left_to(__file__)
    assert words[:4] == ["python", "-m", "engine", "why"]
    monkeypatch.chdir(ROOT)
    assert engine_main(words[3:]) == 0
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme.split(f"$ {shlex.join(words)}\n", 1)[1].split("```", 1)[0]
    assert capsys.readouterr().out == shown
