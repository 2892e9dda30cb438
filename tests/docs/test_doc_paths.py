"""Every repository path named in a docstring, a comment, the README or docs/*.md exists, and so
does every bare file name (`radix_cache.py`) the README and docs/*.md name.

A path is a run like `radix/tree/radix_cache.py` or `radix/tokens/` that starts with one of the
repository's top-level folders; `viz/cluster` (a module named without `.py`) counts when the
module exists. Paths of other projects (`sglang/srt/mem_cache/...`, `/tmp/sgl/ex`) do not
start with one of ours, or start after a `/`, so they are not checked. A bare name is a
`name.py` with no folder before it: some file of the repository must have that name (another
project's file is written with its folder, `mem_cache/common.py`, and so is not a bare name).
docs/HISTORY.md is left out of both checks: it tells what was done under the names of the day,
files since folded, split or retired among them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("radix", "engine", "runtime", "scenarios", "viz", "pages", "tests", "tools",
       "benchmarks", "examples", "docs", "scripts")
PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(TOP) + r")/[\w./-]*\w/?)")
BARE = re.compile(r"(?<![\w./~-])([\w-]+\.py)(?![\w/-])")
SKIP = {".venv", ".git", "__pycache__", "node_modules"}
HISTORY = ROOT / "docs" / "HISTORY.md"


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


def stale_names(text: str, names: set[str]) -> list[str]:
    """The bare file names (`key.py`) named in `text` that no file in `names` has; a name with a
    folder before it (ours, checked by `stale_paths`, or another project's) is not bare.

    >>> stale_names("`node.py` (was `key.py`), SGLang's `mem_cache/common.py`", {"node.py"})
    ['key.py']
    """
    return [m.group(1) for m in BARE.finditer(text) if m.group(1) not in names]


def _file_names(root: Path = ROOT) -> set[str]:
    names = set()
    for _here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        names.update(files)
    return names


def _docs() -> list[Path]:
    """README.md and docs/*.md, docs/HISTORY.md left out (its names are of their day)."""
    return [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p != HISTORY)]


def _sources() -> list[Path]:
    files = [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)
             and p != Path(__file__).resolve()]  # this file names stale paths on purpose
    return files + _docs()


def _each_line(files: list[Path], check) -> list[str]:
    found = []
    for f in files:
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{f.relative_to(ROOT)}:{i}: {p}" for p in check(line)]
    return found


def test_the_check_finds_a_stale_path():
    """Known answer: of two paths named, the one that was moved away is reported."""
    assert stale_paths("radix/tree/radix_cache.py keeps the log (was radix/tree/eventlog.py)") == [
        "radix/tree/eventlog.py"]


def test_the_check_finds_a_stale_bare_name():
    """Known answer, against this repository's files: `eventlog.py` (folded into radix_cache.py
    long ago) is reported, `radix_cache.py` is not, nor SGLang's `managers/schedule_batch.py`."""
    names = _file_names()
    line = ("the log moved to `radix_cache.py` (was `eventlog.py`), as SGLang's "
            "`managers/schedule_batch.py` keeps its own")
    assert stale_names(line, names) == ["eventlog.py"]


def test_every_named_path_exists():
    stale = _each_line(_sources(), stale_paths)
    assert not stale, "paths named that do not exist:\n" + "\n".join(stale)


def test_every_bare_file_name_in_the_docs_exists():
    """README.md and docs/*.md (docs/HISTORY.md aside) name no file that is gone: a file
    of another project is written with its folder (`mem_cache/common.py`)."""
    names = _file_names()
    stale = _each_line(_docs(), lambda line: stale_names(line, names))
    assert not stale, ("bare file names that no file has (write another project's file with its "
                       "folder):\n" + "\n".join(stale))
