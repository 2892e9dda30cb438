"""docs/CONTRACTS.md cannot go stale: every public name is listed, every file and module it names
exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import engine
import radix

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "CONTRACTS.md").read_text()


def test_every_public_name_is_listed():
    missing = [n for n in [*radix.__all__, *engine.__all__] if not re.search(rf"\b{n}\b", DOC)]
    assert not missing, f"exported but not in docs/CONTRACTS.md: {missing}"


def test_every_public_name_resolves():
    for name in radix.__all__:
        assert getattr(radix, name) is not None
    for name in engine.__all__:
        assert getattr(engine, name) is not None


def test_every_file_and_module_named_exists():
    files = set(re.findall(r"`((?:radix|engine|viz|pages|scenarios|tests)/[\w/]+\.py)`", DOC))
    assert files, "the page names no files"
    missing = [f for f in files if not (ROOT / f).exists()]
    assert not missing, f"docs/CONTRACTS.md names files that do not exist: {missing}"
    for mod in set(re.findall(r"`(radix(?:\.\w+)+)`", DOC)):
        importlib.import_module(mod)
