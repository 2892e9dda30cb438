"""The command line under careless and hostile input (issue 40, item 6): every bound checked
before the work starts, memory budgets, a trace's text escaped on the terminal, a closed pipe.

Each test fails on the code before the fix: --replicas 1,025 was accepted (10,000 held 1.7 GB),
`--router all,bogus` blamed 'all', `sweep --out /nonexistent/x` ran every cell first, explain had
no budget (5.2 GB on a 60 MB trace), rids reached the terminal raw, `| head` ended in rc 2.
"""

from __future__ import annotations

import argparse
import io
import json

import pytest

import radix.cli.cluster as cli_cluster
import radix.cli.explain as cli_explain
import radix.cli.sweep as cli_sweep
from radix.cli import main
from radix.cluster.sweep import Grid

MAX_REPLICAS = 1_024  # radix/cluster/sim.py's
RAG = "examples/traces/rag.jsonl.gz"  # 20 requests, 46,169 tokens: explain's estimate 14 MiB


def _trace(tmp_path, rids) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"rid": r, "arrival": i, "tokens": list(range(20)),
                                        "output_len": 1}) + "\n" for i, r in enumerate(rids)))
    return str(path)


def test_replicas_are_bounded_before_any_run():
    """1,024 is the most (each replica is a simulated engine of its own); 1,025 and a
    20-digit count are argument errors, and a sweep grid or a library call refuses them too."""
    assert cli_cluster.replica_list(f"1,{MAX_REPLICAS}") == [1, 1_024]
    for text in (f"{MAX_REPLICAS + 1}", "2," + "9" * 20):
        with pytest.raises(argparse.ArgumentTypeError, match="at most|<= 1,024"):
            cli_cluster.replica_list(text)
    with pytest.raises(ValueError, match="<= 1,024"):
        Grid(replicas=(2, MAX_REPLICAS + 1))


def test_router_list_names_the_unknown_router_not_all():
    """`all` expands inside a list (each router once); the bad name is the one named."""
    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli_cluster.router_list("all,bogus")
    assert "unknown 'bogus';" in str(err.value)
    assert cli_cluster.router_list("random,all")[0] == "random"


def test_out_of_memory_in_cluster_names_replicas(monkeypatch, capsys):
    """A MemoryError with no text: the hint fits the command (fewer --replicas first)."""
    def oom(*a, **k):
        raise MemoryError()
    monkeypatch.setattr(cli_cluster, "simulate_cluster", oom)
    assert main(["cluster", RAG, "--replicas", "2", "--router", "random"]) == 2
    assert "out of memory: try fewer --replicas" in capsys.readouterr().err


def test_sweep_checks_its_output_paths_before_the_cells(monkeypatch, capsys, tmp_path):
    ran = []
    monkeypatch.setattr(cli_sweep, "sweep_serial", lambda *a, **k: ran.append(1) or [])
    for flag, path in (("--out", "/nonexistent/x.jsonl"), ("--html", str(tmp_path))):
        assert main(["sweep", RAG, "--serial", "--replicas", "1", "--router", "random",
                     flag, path]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {flag} {path}: ") and RAG not in err
    assert not ran


def test_explain_fits_its_processes_to_the_memory_budget(monkeypatch, capsys):
    """rag: 20 requests, 46,169 prompt + output tokens -> 20 x 40 KB + 46,169 x 300 B = 14 MiB
    a run, 46 MiB in a process. --memory 20 refuses it before it runs; --memory 100 holds two
    processes (this one and one worker), so --jobs 8 becomes 1 (said on stderr)."""
    calls = []

    def fake(trace, cfg, **kw):
        calls.append(kw["jobs"])
        raise ValueError("stop here")
    monkeypatch.setattr(cli_explain, "explain", fake)
    assert main(["explain", RAG, "--memory", "20", "--quiet"]) == 2
    assert "needs about 46 MiB" in capsys.readouterr().err and not calls
    assert main(["explain", RAG, "--memory", "100", "--jobs", "8", "--quiet"]) == 2
    assert calls == [1] and "1 what-if worker processes, not 8" in capsys.readouterr().err
    assert main(["explain", RAG, "--memory", "1000", "--jobs", "8", "--quiet"]) == 2
    assert calls[-1] == 8


def test_rids_are_escaped_on_the_terminal(tmp_path, capsys):
    """A rid with ESC, CR and BEL: the table shows them as escapes, never the bytes."""
    hostile = "r\x1b[2J\rx\x07"
    assert main(["simulate", _trace(tmp_path, [hostile, "plain"])]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "r\\x1b[2J\\rx\\x07" in out


class _ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_quietly(monkeypatch, tmp_path, capsys):
    """`simulate ... | head -1`: the reader left; exit 0 and nothing on stderr (it was
    "error: ...: [Errno 32] Broken pipe", rc 2)."""
    trace = _trace(tmp_path, ["a", "b"])
    capsys.readouterr()
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["simulate", trace]) == 0
    assert capsys.readouterr().err == ""
