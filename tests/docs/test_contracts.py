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


def test_every_public_name_is_bound_where_it_is_said_to_be():
    """`from radix import *` binds every listed name: a name in `__all__` the package never
    imports fails here, not in a user's import. engine's names load lazily from the module its
    table names: each must be defined there (a wrong module fails only at first use)."""
    unbound = [n for n in radix.__all__ if n not in vars(radix)]
    assert not unbound, f"in radix.__all__ but never bound: {unbound}"
    assert len(set(radix.__all__)) == len(radix.__all__), "a name listed twice in radix.__all__"
    misplaced = [f"{n} ({mod})" for n, mod in engine._EXPORTS.items()
                 if n not in vars(importlib.import_module(mod))]
    assert not misplaced, f"engine's table names a module that does not define: {misplaced}"


def test_every_file_and_module_named_exists():
    files = set(re.findall(r"`((?:radix|engine|viz|pages|scenarios|tests)/[\w/]+\.py)`", DOC))
    assert files, "the page names no files"
    missing = [f for f in files if not (ROOT / f).exists()]
    assert not missing, f"docs/CONTRACTS.md names files that do not exist: {missing}"
    for mod in set(re.findall(r"`(radix(?:\.\w+)+)`", DOC)):
        importlib.import_module(mod)
