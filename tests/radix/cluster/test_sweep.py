"""The sweep: grid files, serial and Ray give the same rows byte for byte, the CLI and HTML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from radix.cli import main
from radix.cluster.sweep import (
    Grid,
    grid_cells,
    load_grid,
    run_cell,
    start_ray,
    sweep_ray,
    sweep_serial,
    to_jsonl,
)
from radix.cluster.sweep_html import figures, sweep_html
from radix.traces import load_trace

TRACE = Path(__file__).resolve().parents[3] / "examples/traces/multi_turn.jsonl.gz"
GRID = Grid(replicas=(1, 2), router=("round-robin", "cache-aware", "kv-overlap"),
            capacity=(None, 3000))


@pytest.fixture(scope="module")
def local_ray():
    """One small local Ray for the module (2 CPUs), shut down after it."""
    ray = pytest.importorskip("ray")
    start_ray(num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def serial_rows():
    return sweep_serial(load_trace(TRACE), grid_cells(GRID))


def test_ray_rows_equal_serial_rows(local_ray, serial_rows):
    seen = []
    rows = sweep_ray(load_trace(TRACE), grid_cells(GRID), progress=lambda d, n: seen.append(d))
    assert to_jsonl(rows) == to_jsonl(serial_rows)
    assert sorted(seen) == list(range(1, 13)) and local_ray.is_initialized()  # not ours to stop


def test_cli_joins_a_running_cluster_by_address(local_ray, serial_rows, tmp_path):
    """`sweep --ray-address` from another process joins the module's running Ray by its GCS
    address (Ray's own local cluster; a second driver, as against a remote head) and ships
    this `radix` to its workers (`py_modules`). Run from tmp_path with `radix` on the
    driver's PYTHONPATH only: the row is byte-identical to the serial run's. The child
    inherits RAY_AUTH_MODE=token, which Ray set here on starting with token auth. One cell
    keeps it to one new worker. `--workers` with an address is refused (the cluster has its
    own CPUs)."""
    address = local_ray.get_runtime_context().gcs_address
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": root}
    sweep = [sys.executable, "-m", "radix", "sweep", str(TRACE), "--ray-address", address,
             "--replicas", "2", "--router", "kv-overlap", "--capacity", "3000"]
    done = subprocess.run([*sweep, "--out", "rows.jsonl"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 cells in" in done.stdout and f"Ray ({address})" in done.stdout
    want = [r for r in serial_rows if (r["replicas"], r["router"], r["capacity"])
            == (2, "kv-overlap", 3000)]
    assert (tmp_path / "rows.jsonl").read_text() == to_jsonl(want)
    with pytest.raises(ValueError, match="--workers sets a local Ray's CPUs"):
        start_ray(address, num_cpus=2)


def test_grid_cells_and_rows(serial_rows):
    """2 x 3 x 2 cells, replicas slowest; a 3,000-token pool per replica cannot hold the
    5-turn chat's last three turns (4,300 and 4,720 tokens, and 2,550 + its reply), so the
    capacity axis reaches the runs; the unbounded pool takes all five."""
    assert len(serial_rows) == 12 and [r["replicas"] for r in serial_rows] == [1] * 6 + [2] * 6
    assert all(r["totals"]["rejected"] == 3 for r in serial_rows if r["capacity"])
    assert all(r["totals"]["rejected"] == 0 for r in serial_rows if not r["capacity"])
    one = run_cell(load_trace(TRACE), grid_cells(GRID)[0])
    assert json.dumps(one, sort_keys=True) == json.dumps(serial_rows[0], sort_keys=True)


def test_grid_files(tmp_path):
    toml = tmp_path / "g.toml"
    toml.write_text('replicas = [1, 4]\nrouter = ["session"]\ncapacity = ["none", 5000]\n')
    g = load_grid(toml)
    assert (g.replicas, g.router, g.capacity) == ((1, 4), ("session",), (None, 5000))
    bad = tmp_path / "b.json"
    bad.write_text('{"replicas": [1], "routers": ["session"]}')
    with pytest.raises(ValueError, match="unknown grid keys \\['routers'\\]"):
        load_grid(bad)
    bad.write_text('{"replicas": [0]}')
    with pytest.raises(ValueError, match="replicas must all be >= 1"):
        load_grid(bad)
    bad.write_text('{"router": ["nearest"]}')
    with pytest.raises(ValueError, match="unknown \\['nearest'\\]"):
        load_grid(bad)


def test_html_has_a_line_per_router(serial_rows):
    figs = figures(serial_rows)
    names = [t["name"] for t in figs[0]["data"]]
    assert names == ["round-robin capacity=None", "round-robin capacity=3000",
                     "cache-aware capacity=None", "cache-aware capacity=3000",
                     "kv-overlap capacity=None", "kv-overlap capacity=3000"]
    assert figs[0]["data"][0]["x"] == [1, 2]
    page = sweep_html(serial_rows, "t")
    assert page.count("Plotly.newPlot") == 2 and "TTFT p99" in page


def test_sweep_chart_ticks_every_replica_count():
    """The Cluster page's sweep of 1-4 replicas: a tick at 1, 2, 3 and 4 on the log axis (it
    ticked powers of two, none at 3: issue 41 item 10)."""
    rows = [{"router": "round-robin", "replicas": k, "capacity": None, "page_size": 1,
             "block_size": 16, "totals": {"hit_rate": 0.5, "ttft_p99_s": 0.1}}
            for k in (1, 2, 3, 4)]
    for fig in figures(rows):
        assert fig["layout"]["xaxis"]["tickvals"] == [1, 2, 3, 4]


def test_sweep_cli_serial(tmp_path, capsys):
    out, page = tmp_path / "rows.jsonl", tmp_path / "p.html"
    assert main(["sweep", str(TRACE), "--serial", "--replicas", "1,2", "--router",
                 "session", "--out", str(out), "--html", str(page)]) == 0
    assert len(out.read_text().splitlines()) == 2 and page.exists()
    assert "2 cells" in capsys.readouterr().out
    assert main(["sweep", str(TRACE), "--serial", "--grid", str(tmp_path / "none.toml")]) == 2
    assert "none.toml" in capsys.readouterr().err
    assert main(["sweep", str(TRACE), "--ray-address", "10.0.0.9:6379", "--workers", "2"]) == 2
    assert "--workers sets a local Ray's CPUs" in capsys.readouterr().err


def test_a_slow_local_ray_start_is_tried_again(monkeypatch, capsys):
    """A local Ray whose raylet does not register within Ray's hard-coded 30 s raises a bare
    Exception (a loaded machine, not a broken one): `start_ray` shuts it down and starts it
    again, up to RAY_START_TRIES times, then lets the error through; other errors, and any
    error joining a cluster by address, pass at once."""
    import types  # noqa: PLC0415

    from radix.cluster import sweep as sweep_module  # noqa: PLC0415

    calls: list[str] = []

    def fake_ray(failures: int, message: str = "The current node timed out during startup."):
        def init(**kwargs):
            calls.append("init")
            if calls.count("init") <= failures:
                raise Exception(message)  # noqa: TRY002 (Ray's own kind)

        module = types.SimpleNamespace(init=init, shutdown=lambda: calls.append("shutdown"))
        monkeypatch.setitem(sys.modules, "ray", module)

    fake_ray(failures=2)
    start_ray(num_cpus=1)
    assert calls == ["init", "shutdown", "init", "shutdown", "init"]
    assert "slow to start (2 of 3)" in capsys.readouterr().err

    calls.clear()
    fake_ray(failures=sweep_module.RAY_START_TRIES)
    with pytest.raises(Exception, match="timed out during startup"):
        start_ray(num_cpus=1)
    assert calls.count("init") == sweep_module.RAY_START_TRIES

    for failing in ({"message": "some other failure"}, {}):
        calls.clear()
        fake_ray(failures=1, **failing)
        address = None if failing else "10.0.0.1:6379"
        with pytest.raises(Exception, match="other failure|timed out"):
            start_ray(address)
        assert calls == ["init"]
