"""Collection rules for the docstrings' worked examples (`--doctest-modules`, pyproject.toml).

Collecting a module's doctests imports it. A module without an example, or one that imports
torch or transformers, is passed over here (tests/doctest_rule.py says which and why; the
latter's examples run as tests/test_doctests_torch.py), so collecting the suite imports neither
torch nor transformers. Test files themselves are collected as always.
"""

from __future__ import annotations

from tests.doctest_rule import skipped_at_collection


def pytest_ignore_collect(collection_path, config):
    if config.getoption("doctestmodules") and skipped_at_collection(collection_path):
        return True
    return None


def pytest_configure(config):
    """Under pytest-xdist (`-n 2`, the README's test command) each worker's torch gets its share
    of the cores: torch's OpenMP pool otherwise spins one thread per core in every worker, and
    two oversubscribed pools on two cores slow the engine tests several-fold. Set before any
    test imports torch (collection never does)."""
    import os

    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        share = max(1, (os.cpu_count() or 1) // int(workers))
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
