"""Shared fixtures: the default model (SmolLM2-135M-Instruct, CPU fp32), loaded once a session.

Every engine test reads the same weights; loading them takes seconds from the converted cache
(about 30 s the very first time, when the GGUF file is dequantized). Tests must not mutate it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smol():
    from engine.model import load_model  # imported here: collecting non-engine tests needs no torch

    return load_model(device="cpu")
