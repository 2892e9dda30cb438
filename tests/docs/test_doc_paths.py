"""Every repository path named in a docstring, a comment, the README or docs/*.md exists.

A path is a run like `radix/tree/radix_cache.py` or `radix/tokens/` that starts with one of the
repository's top-level folders; `viz/cluster` (a module named without `.py`) counts when the
module exists. Paths of other projects (`sglang/srt/mem_cache/...`, `/tmp/sgl/ex`) do not
start with one of ours, or start after a `/`, so they are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("radix", "engine", "runtime", "scenarios", "viz", "pages", "tests", "tools",
       "benchmarks", "examples", "docs", "scripts")
PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(TOP) + r")/[\w./-]*\w/?)")
SKIP = {".venv", ".git", "__pycache__", "node_modules"}


def stale_paths(text: str, root: Path = ROOT) -> list[str]:
    """The repository paths named in `text` that do not exist under `root`.

    >>> stale_paths("see radix/tree/radix_cache.py and radix/trace.py, not /tmp/radix/x.py")
    ['radix/trace.py']
    """
    out = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if not (root / path).exists() and not (root / (path + ".py")).exists():
            out.append(path)
    return out


def _sources() -> list[Path]:
    files = [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)
             and p != Path(__file__).resolve()]  # this file names stale paths on purpose
    return files + [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_check_finds_a_stale_path():
    """Known answer: of two paths named, the one that was moved away is reported."""
    assert stale_paths("radix/tree/radix_cache.py keeps the log (was radix/tree/eventlog.py)") == [
        "radix/tree/eventlog.py"]


def test_every_named_path_exists():
    stale = []
    for f in _sources():
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            stale += [f"{f.relative_to(ROOT)}:{i}: {p}" for p in stale_paths(line)]
    assert not stale, "paths named that do not exist:\n" + "\n".join(stale)
