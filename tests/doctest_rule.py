"""Which modules the doctest collection imports, and which wait until the tests run.

pytest runs the docstrings' worked examples (`--doctest-modules` over radix/, engine/, runtime/,
scenarios/, viz/, examples/), and collecting a module's doctests imports the module. So the
collection (conftest.py at the root) passes over a module that has no example (`>>>`): there is
nothing to collect and importing it would only cost time; and over a module whose import imports
torch or transformers (itself or through a project module it imports at its top; seconds on an idle
machine, a minute on a loaded one, paid by every run, even `pytest tests/radix/tree/test_tree.py`):
its examples run in tests/docs/test_doctests_torch.py instead, as a test, so torch is imported only
by a run that selects it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCTEST_DIRS = ("radix", "engine", "runtime", "scenarios", "viz", "examples")
HEAVY = ("torch", "transformers")


def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def has_examples(path: Path) -> bool:
    return ">>>" in _source(path)


def _top_imports(path: Path) -> list[str]:
    """The modules a file imports at its top level (not inside functions): 'a.b' for `import
    a.b` and `from a.b import c`."""
    tree = ast.parse(_source(path))
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return out


def _file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_torch(path: Path) -> bool:
    """Importing the module imports torch or transformers: it does at its top, or a project
    module it imports at its top does (engine/openai_api.py through engine/sampling.py)."""
    return _heavy(path.resolve())


@functools.cache
def _heavy(path: Path) -> bool:
    _VISITING.add(path)  # a module on the way down (an import cycle) counts as light there
    try:
        for module in _top_imports(path):
            if module.split(".")[0] in HEAVY:
                return True
            dep = _file(module) if module.split(".")[0] in DOCTEST_DIRS else None
            if dep is not None and dep not in _VISITING and _heavy(dep):
                return True
        return False
    finally:
        _VISITING.discard(path)


_VISITING: set[Path] = set()


def skipped_at_collection(path: Path) -> bool:
    """A module of the doctest directories that collection does not import."""
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return False
    if path.suffix != ".py" or rel.parts[0] not in DOCTEST_DIRS or len(rel.parts) < 2:
        return False
    return not has_examples(path) or imports_torch(path)


def torch_examples() -> list[Path]:
    """The modules whose examples tests/docs/test_doctests_torch.py runs."""
    return sorted(p for d in DOCTEST_DIRS for p in (ROOT / d).rglob("*.py")
                  if "frontend" not in p.parts and has_examples(p) and imports_torch(p))
