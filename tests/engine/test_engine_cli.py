"""`python -m engine run`: rows and totals on a small trace, and one-line errors with exit 2.

Uses the tiny random-weight config of examples/configs (2 layers, hidden 64), so each forward
takes milliseconds; the real model's numbers are covered by test_engine_service.py.
"""

from __future__ import annotations

import json
import re

import pytest

from engine.handles import RequestResult

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
format_rows = main = totals = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global format_rows, main, totals
    from engine.__main__ import format_rows, main, totals


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


def test_the_readmes_random_init_line(capsys, monkeypatch):
    """The README's `python -m engine run examples/traces/three_requests.jsonl.gz --random-init
    examples/configs/tiny_llama.json`, run here with the engine imported
    (tools/readme_commands.py --quick leaves it to this file): exit 0, a row per request of the
    three-request walk (R2 matches R1's 2,055 tokens, R3 512) and the totals."""
    from readmehelp import ROOT, left_to

    (words,) = left_to(__file__)
    assert words[:4] == ["python", "-m", "engine", "run"] and "--random-init" in words
    monkeypatch.chdir(ROOT)
    assert main(words[3:]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()
            if line.split() and line.split()[0] in ("R1", "R2", "R3")}
    assert rows == {"R1": ["2,151", "0"], "R2": ["2,135", "2,055"], "R3": ["2,624", "512"]}
    assert "matched 2,567 of 6,910 prompt tokens" in out


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


def _rows(out: str, rids) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in rids}


def test_cache_salt_and_extra_key_never_share_across_namespaces(tmp_path, capsys):
    """Same 41 leading tokens, one request every 0.2 s: s2 (salt B) must not hit s1 (salt A);
    s3 (salt A) matches s1's 41; e1 (extra_key lora) and e2 (lora + salt A) match nothing."""
    shared = list(range(2_000, 2_041))
    lines = [("s1", {"cache_salt": "A"}), ("s2", {"cache_salt": "B"}), ("s3", {"cache_salt": "A"}),
             ("e1", {"extra_key": "lora"}), ("e2", {"extra_key": "lora", "cache_salt": "A"})]
    path = tmp_path / "ns.jsonl"
    path.write_text("".join(json.dumps({"rid": rid, "arrival": 0.2 * k, "output_len": 1,
                                        "tokens": shared + [3_000 + k], **ns}) + "\n"
                            for k, (rid, ns) in enumerate(lines)))
    assert main(["run", str(path), "--random-init", TINY]) == 0
    rows = _rows(capsys.readouterr().out, {"s1", "s2", "s3", "e1", "e2"})
    assert {rid: int(r[2]) for rid, r in rows.items()} == {"s1": 0, "s2": 0, "s3": 41,
                                                           "e1": 0, "e2": 0}
    assert {rid: int(r[4]) for rid, r in rows.items()}["s2"] == 0  # vLLM's salted block hash


def test_chunked_prefill_and_page_size_options(tmp_path, capsys):
    """--chunked-prefill-size 16 --page-size 8: a (50 tokens) prefills in chunks 16, 16, 16, 2;
    b matches a's 40 shared tokens, exactly 5 pages of 8, as with page 1. A chunk smaller than
    a page could never run and is refused."""
    args = ["run", _trace(tmp_path), "--random-init", TINY, "--chunked-prefill-size", "16",
            "--page-size", "8"]
    assert main(args) == 0
    rows = _rows(capsys.readouterr().out, "abc")
    assert rows["b"][1:4] == ["52", "40", "12"] and rows["a"][1:4] == ["50", "0", "50"]
    assert main(args[:4] + ["--chunked-prefill-size", "4", "--page-size", "8"]) == 2
    assert "chunked_prefill_size (4) must be >= page_size (8)" in capsys.readouterr().err


def test_a_prompt_larger_than_the_pool_is_one_error_line_not_a_hang(tmp_path, capsys):
    """c needs 20 + 2 + 1 = 23 slots, a needs 50 + 3 + 1 = 54: with 40 slots the run stops before
    it starts and names a; with a pool far beyond memory it says so instead of a traceback."""
    assert main(["run", _trace(tmp_path), "--random-init", TINY, "--capacity", "40"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "request a: 50 prompt + 3 new tokens" in err[0]
    assert main(["run", _trace(tmp_path), "--random-init", TINY, "--capacity", str(10**11)]) == 2
    assert "does not fit on cpu" in capsys.readouterr().err


def test_rows_and_totals_count_a_retracted_prompt_once():
    """r3: 48 prompt tokens, 32 matched at admission, 16 prefilled; retracted after 11 outputs,
    it re-prefills 48 + 11 - 32 = 27 more (prefilled 43). Its row and the totals must show a
    48-token prompt (not 32 + 43 = 75) and a hit rate of 32 / (48 + 48) = 33.3%."""
    metrics = {"matched_tokens": 32, "prefilled_tokens": 43, "prompt_tokens": 48, "ttft": 0.01,
               "decode_tps": 100.0, "retractions": 1}
    results = [RequestResult("r3", [1] * 32, "", metrics),
               RequestResult("r0", [1] * 32, "", {**metrics, "matched_tokens": 0,
                                                  "prefilled_tokens": 48, "retractions": 0})]
    assert format_rows(results)[1].split()[1:4] == ["48", "32", "43"]
    line = totals(results, 1.0, "m")[0]
    assert "matched 32 of 96 prompt tokens (33.3%" in line
    assert "prefilled 91 (1 retractions re-prefilled)" in line


def test_help_parses_without_torch():
    """`engine serve --help` and `engine run --help` answer before torch is imported (it took
    ~50 s on a busy machine: engine.kv_pool and engine.cluster imported it at the top). A
    fresh interpreter, so this process's torch does not count; and serve's router choices are
    the cluster's."""
    import subprocess
    import sys

    from engine.cluster import ROUTERS
    from engine.serve import ROUTERS as SERVE_ROUTERS

    assert SERVE_ROUTERS == ROUTERS
    code = ("import sys\nfrom engine.__main__ import build_parser\n"
            "for cmd in ('serve', 'run'):\n"
            "    try:\n        build_parser().parse_args([cmd, '--help'])\n"
            "    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert "--kv-events-endpoint" in out.stdout and "TRACE" in out.stdout.upper()
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stdout[-300:]


def test_host_ratio_splits_matched_tokens_into_device_and_host(tmp_path, capsys):
    """Pool 100, host 2x (201 tokens): a (40 shared + 20) and b (40 + 20) cache 84 tokens with
    their 2 KV outputs each; c (20 + 2) demotes a's 22-token tail to host; a again matches 59:
    40 on the device, 19 loaded back from the host (making room demotes b's tail), 1 prefilled.
    The host tier needs the cache on (one error line otherwise)."""
    shared = list(range(2_000, 2_040))
    lines = [{"rid": rid, "arrival": 0.0, "tokens": toks, "output_len": 3}
             for rid, toks in (("a", shared + list(range(3_000, 3_020))),
                               ("b", shared + list(range(4_000, 4_020))),
                               ("c", list(range(5_000, 5_020))),
                               ("a2", shared + list(range(3_000, 3_020))))]
    path = tmp_path / "h.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["run", str(path), "--random-init", TINY, "--capacity", "100", "--burst"]
    assert main(args + ["--host-ratio", "2"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out, ("a", "b", "c", "a2"))
    assert rows["a2"][1:5] == ["60", "59", "40", "19"] and rows["a2"][6] == "1"
    assert rows["b"][1:5] == ["60", "40", "40", "0"]
    assert ("host tier (write_through, host pool 201 tokens): device hit 80, host hit 19 "
            "(loaded back), miss 101 prompt tokens; backed up 106, demoted 44, loaded back 19, "
            "host evicted 0") in out
    assert main(args + ["--host-ratio", "2", "--no-cache"]) == 2
    assert "--host-ratio needs the prefix cache on" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(args + ["--host-ratio", "0"])
    assert "--host-ratio: '0' must be > 0" in capsys.readouterr().err


def _split(out: str) -> tuple[int, int, int]:
    """(device hit, host hit, miss) from the engine's host-tier line."""
    line = next(x for x in out.splitlines() if x.startswith("host tier ("))
    found = re.search(r"device hit ([\d,]+), host hit ([\d,]+) \(loaded back\), miss ([\d,]+)",
                      line)
    return tuple(int(g.replace(",", "")) for g in found.groups())


def _replayed(path: str, capacity: int) -> tuple[int, int, int]:
    from radix.hosttier.replay import replay_host_tier
    from radix.traces import load_trace

    run = replay_host_tier(load_trace(path), capacity, 2.0)
    return run.device_hit, run.host_hit, run.miss


def test_as_simulate_forces_recorded_replies_so_the_split_is_simulates(tmp_path, capsys):
    """Pool 60, host 2x. t1 = P (30 tokens) with a recorded 5-token reply R: forced as its
    output, P + R (35 tokens with KV) is cached and backed up. x (40 tokens, no reply) needs 40
    slots, 25 are free: t1's 35 are demoted. t2 = P + R + 10 new tokens: its first 35 are on the
    host; loading them needs 35 slots, 20 are free, so x is demoted; 0 device, 35 host, 10
    miss (80 in all: 30 + 40 + 10), as replay_host_tier (simulate) splits it. Unforced, t1
    would cache its own sampled tokens in place of R and t2 would find only P's 30 on the host.
    --as-simulate needs the host tier."""
    p, r = list(range(2_000, 2_030)), list(range(6_000, 6_005))
    lines = [{"rid": "t1", "arrival": 0.0, "tokens": p, "output_len": 5, "output_tokens": r},
             {"rid": "x", "arrival": 0.0, "tokens": list(range(3_000, 3_040)), "output_len": 1},
             {"rid": "t2", "arrival": 0.0, "tokens": p + r + list(range(4_000, 4_010)),
              "output_len": 1}]
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["run", str(path), "--random-init", TINY, "--capacity", "60", "--burst"]
    assert main(args + ["--host-ratio", "2", "--as-simulate"]) == 0
    out = capsys.readouterr().out
    assert _split(out) == _replayed(str(path), 60) == (0, 35, 80)
    assert "loaded back 35, demoted 75: equal to the engine's" in out
    assert main(args + ["--as-simulate"]) == 2
    assert "--as-simulate compares with `simulate --host-ratio`" in capsys.readouterr().err


def test_a_real_trace_through_the_host_tier_splits_as_simulate_does(capsys):
    """examples/traces/rag.jsonl.gz (20 requests, 46,169 prompt tokens, no recorded replies:
    one output token each) at a 4,096-token pool, host 2x: the engine's device / host / miss
    split equals replay_host_tier's (`python -m radix simulate ... --host-ratio 2`), with
    demotions, host evictions and loads back along the way (docs/HOST_TIER.md: 10,610 / 1,319 /
    34,240)."""
    trace = "examples/traces/rag.jsonl.gz"
    assert main(["run", trace, "--random-init", TINY, "--capacity", "4096", "--host-ratio", "2",
                 "--as-simulate", "--burst"]) == 0
    out = capsys.readouterr().out
    assert _split(out) == _replayed(trace, 4096) == (10_610, 1_319, 34_240)
    assert "host evicted 26,100" in out and "equal to the engine's" in out
