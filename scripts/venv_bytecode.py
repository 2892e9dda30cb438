"""Compiled modules cached where the environment asks Python not to write them.

scripts/setup.sh copies this file into the project's .venv (site-packages/radixlens_bytecode.py)
with a one-line `radixlens-bytecode.pth` that imports it when any of the venv's interpreters
starts. Where PYTHONDONTWRITEBYTECODE is set (this machine class sets it; so do many container
images), or `-B` is given, Python writes no `__pycache__`, so each process compiles every module
it imports from source, every time: importing engine/remote.py (torch, transformers) took 25
CPU-s against 11 with a cache, pandas 4.1 against 1.7, and the tests start dozens of such
processes (servers, engine children, CLI runs). Here those interpreters cache anyway, under
.venv/pycache (`sys.pycache_prefix`, Python's own mirror of the source tree), so the source
folders stay free of `__pycache__`, as the variable wants. A prefix the user set is kept.
"""

import sys
from pathlib import Path

if sys.dont_write_bytecode and sys.pycache_prefix is None:
    sys.pycache_prefix = str(Path(sys.prefix) / "pycache")
    sys.dont_write_bytecode = False
