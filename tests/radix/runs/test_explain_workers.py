"""The explainer's what-ifs in worker processes (radix/runs/workers.py): the same figures as one
process, a configuration asked twice run once, and progress on stderr from `explain`."""

from __future__ import annotations

import json

import radix.runs.explain as rex
from radix.cli import main
from radix.cli.options import StderrProgress
from radix.runs.sim import SimConfig
from radix.traces import load_trace


def spaced_trace(tmp_path):
    """Six requests, 3 x 2 namespaces (cache_salt a / b), sharing 64 tokens within each."""
    path = tmp_path / "ns.jsonl"
    path.write_text("".join(json.dumps({"rid": f"r{i}", "arrival": i, "cache_salt": "ab"[i % 2],
                                        "tokens": list(range(64)) + [1000 + i] * 8,
                                        "output_len": 4}) + "\n" for i in range(6)))
    return path


def test_two_workers_give_what_one_process_gives(tmp_path, monkeypatch):
    """Same runs, same figures to the last bit. Unbounded base: the curve's first point and the
    namespaces' "with" are the base configuration, run once: 1 + 3 capacities + 3 page sizes +
    1 without namespaces = 8 runs, not 10."""
    trace = load_trace(spaced_trace(tmp_path))
    seen = []
    real = rex._run_what_ifs
    monkeypatch.setattr(rex, "_run_what_ifs", lambda t, runs, *a: seen.append(len(runs)) or
                        real(t, runs, *a))
    one = rex.what_ifs(trace, SimConfig(policy="fcfs"), 400, capacities=3, jobs=1)
    two = rex.what_ifs(trace, SimConfig(policy="fcfs"), 400, capacities=3, jobs=2)
    assert one == two and seen == [8, 8]
    assert [p["capacity"] for p in one["capacity"]] == [None, 400, 40, 4]
    assert one["capacity"][0]["tree_hit_rate"] == one["namespaces"][0]["tree_hit_rate"]
    # salts keep the two halves apart: without them all six share the 64-token prefix
    assert one["namespaces"][1]["tree_hit_rate"] > one["namespaces"][0]["tree_hit_rate"]


def test_explain_says_where_it_is_on_stderr(tmp_path, capsys):
    """7 what-ifs (unbounded, 2 capacities, 3 page sizes, without namespaces) in 6 simulator
    runs: "page 1, blocks of 1" rides on the unbounded base (riders.py). A line per finished
    run, each but the last with the time left."""
    path = spaced_trace(tmp_path)
    assert main(["explain", str(path), "--capacities", "2", "--jobs", "2"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith("explain: 0% buckets: request 0 of 6"), lines
    assert any("what-ifs: 6 runs in 2 worker processes" in x for x in lines), lines
    done = [x for x in lines if " done (2 worker processes)" in x]
    assert len(done) == 6 and all(x.endswith(" s left") for x in done[:-1]), lines
    assert lines[-1].endswith("what-if 6 of 6 done (2 worker processes)"), lines
    assert "hit rate (all prompts) against KV capacity" in captured.out
    assert main(["explain", str(path), "--capacities", "2", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_lines_are_throttled_within_a_stage():
    """Within a stage a line every 10 s at most; a new stage is said at once."""
    now = iter([0.0, 1.0, 11.0, 12.0])
    p = StderrProgress("x", clock=lambda: next(now))
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        for text in ("a: 1", "a: 2", "a: 3", "b: 1"):
            p(0.5, text)
    said = buf.getvalue().splitlines()
    assert said == ["x: 50% a: 1", "x: 50% a: 3", "x: 50% b: 1"]
