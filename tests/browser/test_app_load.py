"""The short app load test (CI): 2 browser sessions through one round each (a trace replay and
a scrub, a Tour step, a Live prompt that starts the session's own engine; a second round added
60-200 s to CI and nothing the checks below look at), then all close: the server's memory comes
back within 10% of where it started and no engine is left. The full version with its figures
is benchmarks/app_load.py."""

from __future__ import annotations

import importlib.util

import pytest
from browserhelp import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.engine]


def test_two_sessions_memory_comes_back(tmp_path, browser):
    # loaded from its file: benchmarks/ on sys.path would shadow the engine package (its
    # engine.py) for every later import, and for the engine's spawned model process
    spec = importlib.util.spec_from_file_location("app_load", ROOT / "benchmarks" / "app_load.py")
    app_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app_load)
    run = app_load.run

    out = run(sessions=2, rounds=1, num_requests=20, live=True, workdir=tmp_path, light=True,
              browser=browser)  # the session's Chromium: one sync Playwright per process
    assert out["engines_left"] == 0, out
    assert out["peak_mb"] > out["baseline_mb"], out  # the load did hold memory meanwhile
    assert out["after_over_baseline"] <= 1.10, out
