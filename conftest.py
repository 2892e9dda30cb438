"""Collection rules for the docstrings' worked examples (`--doctest-modules`, pyproject.toml).

Collecting a module's doctests imports it. A module without an example, or one that imports
torch or transformers, is passed over here (tests/doctest_rule.py says which and why; the
latter's examples run as tests/docs/test_doctests_torch.py), so collecting the suite imports neither
torch nor transformers. Test files themselves are collected as always.

torch runs one thread in the tests and in every process they start (the Streamlit server, the
engine's model process, `engine serve`), through OMP_NUM_THREADS, set before anything imports
torch. The suite shares two cores with the Streamlit server and Chromium; torch's OpenMP threads
wait for each other at every op, so one preempted thread stalls all of them: the real-model
test `test_pool_too_small_retracts_...` took 174 s with torch's default two threads and 12.8 s
with one, on the same loaded machine, one run each. The tests check text, logits and counts,
never speed, and compare runs made under the same setting.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.doctest_rule import skipped_at_collection  # noqa: E402


def pytest_ignore_collect(collection_path, config):
    if config.getoption("doctestmodules") and skipped_at_collection(collection_path):
        return True
    return None


# Under `-n 2` the longest units start first, so the two workers end close together (longest
# first; measured serially on the 2-core machine, stop 30: the shared-server browser tests about
# 380 s, the others below 30-200 s each); every other unit follows in collection order. The app
# load test starts its own server, so it runs beside the shared-server browser tests, not after.
FIRST = (
    "browser",
    "tests/browser/test_app_load.py",
    "tests/app/test_app_live.py",
    "tests/docs/test_readme_commands.py",
    "tests/engine/test_engine_service.py",
    "tests/scenarios/test_classroom.py",
    "tests/engine/test_engine_serve.py",
    "tests/engine/test_engine_generation.py",
    "tests/engine/test_engine_cluster.py",
)


def _group(item) -> str:
    path = item.nodeid.split("::")[0]
    if item.get_closest_marker("browser") and path not in FIRST:
        return "browser"
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """How `pytest -n 2` (the README's test command; `--dist loadgroup` in pyproject.toml) shares
    the tests out: the browser tests on the shared Streamlit server in one group, so one worker
    runs them all against one server and one Chromium (two servers and two browsers on two cores
    starved the Trace debugger's page), and every other test file a group of its own (its module
    fixtures set up once), handed to whichever worker is free, the longest (FIRST) first. Without
    xdist the groups do nothing and only the order changes (a stable sort: each file's tests stay
    together and in order)."""
    rank = {name: i for i, name in enumerate(FIRST)}
    order = {}
    for item in items:
        group = _group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        order[item] = rank.get(group, len(FIRST))
    items.sort(key=order.__getitem__)
