"""`python -m engine run`: rows and totals on a small trace, and one-line errors with exit 2.

Uses the tiny random-weight config of examples/configs (2 layers, hidden 64), so each forward
takes milliseconds; the real model's numbers are covered by test_engine_service.py.
"""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main

pytestmark = pytest.mark.engine
TINY = "examples/configs/tiny_llama.json"


def _trace(tmp_path, arrivals=(0.0, 0.3, 0.6)):
    shared = list(range(2_000, 2_040))
    lines = [{"rid": "a", "arrival": arrivals[0], "tokens": shared + list(range(3_000, 3_010)),
              "output_len": 3},
             {"rid": "b", "arrival": arrivals[1], "tokens": shared + list(range(4_000, 4_012)),
              "output_len": 3},
             {"rid": "c", "arrival": arrivals[2], "tokens": list(range(5_000, 5_020)),
              "output_len": 2}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_run_prints_a_row_per_request_and_totals(tmp_path, capsys):
    """b arrives after a finished: it matches a's 40 shared tokens and prefills its own 12.
    Totals: matched 40 of 50 + 52 + 20 = 122 prompt tokens."""
    assert main(["run", _trace(tmp_path), "--random-init", TINY, "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in "abc"}
    assert rows["a"][1:4] == ["50", "0", "50"]
    assert rows["b"][1:4] == ["52", "40", "12"]
    assert rows["c"][1:4] == ["20", "0", "20"]
    assert "matched 40 of 122 prompt tokens" in out
    assert "meaningless" in out and "derived, not measured" in out


def test_no_cache_matches_nothing(tmp_path, capsys):
    args = ["run", _trace(tmp_path), "--random-init", TINY, "--no-cache", "--capacity", "1MiB"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "matched 0 of 122 prompt tokens" in out and "cache disabled" in out
    assert "KV pool 2,048 tokens x 512 B" in out  # 2 layers x 2 heads x 16 x 2 x 4 B = 512 B


@pytest.mark.parametrize("argv, words", [
    (["run", "T", "--device", "tpu"], "unknown device 'tpu'"),
    (["run", "T", "--capacity", "lots"], "--capacity 'lots'"),
    (["run", "T", "--random-init", "missing.json"], "missing.json"),
    (["run", "T", "--policy", "best"], "invalid choice"),
    (["run"], "required: trace"),
])
def test_bad_arguments_print_one_line_and_exit_2(tmp_path, capsys, argv, words):
    argv = [_trace(tmp_path) if a == "T" else a for a in argv]
    if "--capacity" in argv:
        argv += ["--random-init", TINY]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and words in err[0]


def test_a_trace_with_a_bad_line_names_it(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"rid": "a", "tokens": [1, 2], "output_len": 1}\n{"rid": "b"}\n')
    assert main(["run", str(path), "--random-init", TINY]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err
