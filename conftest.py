"""Collection rules for the docstrings' worked examples (`--doctest-modules`, pyproject.toml).

Collecting a module's doctests imports it. A module without an example, or one that imports
torch or transformers, is passed over here (tests/doctest_rule.py says which and why; the
latter's examples run as tests/docs/test_doctests_torch.py), so collecting the suite imports neither
torch nor transformers. Test files themselves are collected as always.
"""

from __future__ import annotations

from tests.doctest_rule import skipped_at_collection


def pytest_ignore_collect(collection_path, config):
    if config.getoption("doctestmodules") and skipped_at_collection(collection_path):
        return True
    return None

