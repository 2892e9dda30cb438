"""Shared fixtures: the default model (SmolLM2-135M-Instruct, CPU fp32), loaded once a session.

Every engine test reads the same weights; loading them takes seconds from the converted cache
(about 30 s the very first time, when the GGUF file is dequantized). Tests must not mutate it.

Hypothesis runs without its per-example deadline (200 ms by default) and without the "too
slow" health check: both are wall-clock bounds that a loaded machine fails, and a hang is
caught by the run's own limits. A test's own `@settings(...)` keeps these unless it says
otherwise. The header names the machine factor the waits are stretched by (tests/machine.py).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from machine import factor

settings.register_profile("radixlens", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("radixlens")


def pytest_report_header(config) -> str:
    return f"machine factor {factor():.2f} (tests/machine.py: waits are stretched by it)"


@pytest.fixture(scope="session")
def smol():
    from engine.model import load_model  # imported here: collecting non-engine tests needs no torch

    return load_model(device="cpu")


@pytest.fixture(scope="session", autouse=True)
def _downloads_in_tmp(tmp_path_factory):
    """The pages' prepared downloads (runtime/downloads.py) go to a temporary folder, not the
    checkout's static/: AppTest sessions are never swept, so nothing would remove them."""
    import runtime.downloads as downloads

    downloads.ROOT = tmp_path_factory.mktemp("downloads")
    yield downloads.ROOT
