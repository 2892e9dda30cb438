"""The README's code-block commands that `tools/readme_commands.py --quick` leaves to a test file:
those whose SLOW reason names the file. That file runs them in its own process, where what they
import (torch, the engine, the tokenizer) is imported already; a process of their own imported it
all again (~8-17 CPU-s each, most of tests/docs/test_readme_commands.py's time).

`python -m X args` runs as `X.__main__.main(args)` there: the same argument parsing and code.
"""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("readme_commands",
                                               ROOT / "tools" / "readme_commands.py")
rc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rc)


def left_to(test_file: str) -> list[list[str]]:
    """Each README command that --quick skips with a SLOW reason naming `test_file` (and a full
    run runs), as its words: `["python", "-m", "engine", "why", ...]`."""
    rel = Path(test_file).resolve().relative_to(ROOT).as_posix()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return [shlex.split(rc.runnable(c, {})) for c in rc.code_block_commands(readme)
            if rel in (rc.skip_reason(c, quick=True) or "") and rc.skip_reason(c, False) is None]
