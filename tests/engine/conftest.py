"""Fixtures for the engine tests that talk to a live server through the official client.

`openai`: the `openai` package, imported when the first test that asks for it runs, not when the
suite is collected (importing it takes seconds); a test that asks for it is skipped where it is
not installed. Used by tests/engine/test_engine_serve.py, test_engine_serve_hosttier.py and
test_engine_cluster.py.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def openai():
    return pytest.importorskip("openai")
