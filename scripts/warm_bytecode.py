"""Fills the venv's bytecode cache (.venv/pycache, scripts/venv_bytecode.py) once, right after
scripts/setup.sh installs the packages, so the processes that start together later (the app,
both test workers, their servers and engine children) do not each compile the same modules
from source before the first of them has written the cache.

    python scripts/warm_bytecode.py    # from setup.sh, after pip installs something

It imports the heavy packages the app and the tests use, split over two processes (two cores:
torch and transformers in one, the rest in the other); a package that fails to import is skipped
with its reason (a warm-up never fails the setup). Prints each group's seconds.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS = [
    # the engine: every engine child, forkserver, `engine serve`, the Live page
    ["torch", "transformers.models.llama.modeling_llama", "engine.remote"],
    # the app's pages and the servers and clients the tests start
    ["streamlit", "streamlit.web.bootstrap", "streamlit.testing.v1", "pandas", "pyarrow",
     "plotly.graph_objects", "graphviz", "msgspec", "zmq", "fastapi", "uvicorn", "openai", "ray",
     "playwright.sync_api", "hypothesis", "pages._serve"],
]


def warm(names: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a warm-up skips what it cannot import
            print(f"warm_bytecode: {name} skipped: {type(exc).__name__}: {exc}", file=sys.stderr)


def main() -> None:
    if len(sys.argv) > 1:  # a child: warm the named group
        warm(GROUPS[int(sys.argv[1])])
        return
    t0 = time.monotonic()
    kids = [subprocess.Popen([sys.executable, __file__, str(i)], cwd=ROOT)
            for i in range(len(GROUPS))]
    codes = [k.wait() for k in kids]
    print(f"warm_bytecode: {len(GROUPS)} groups in {time.monotonic() - t0:.1f} s (exit {codes})")


if __name__ == "__main__":
    main()
