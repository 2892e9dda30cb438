"""scripts/setup.sh installs scripts/venv_bytecode.py into .venv: its interpreters cache compiled
modules under .venv/pycache even where PYTHONDONTWRITEBYTECODE or -B says not to write them
(without a cache each process compiled torch and transformers from source)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import sys; print(sys.dont_write_bytecode, sys.pycache_prefix)"


def _ask(*args: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    return subprocess.run([sys.executable, *args], env={**clean, **env}, capture_output=True,
                          text=True, check=True, timeout=60).stdout.split()


def test_the_venv_caches_where_the_environment_says_not_to_write():
    prefix = str(Path(sys.prefix) / "pycache")
    assert _ask("-c", SHOW, PYTHONDONTWRITEBYTECODE="1") == ["False", prefix]
    assert _ask("-B", "-c", SHOW) == ["False", prefix]
    # a prefix the user chose is kept, and so is their wish not to write
    assert _ask("-B", "-c", SHOW, PYTHONPYCACHEPREFIX="/tmp/theirs") == ["True", "/tmp/theirs"]
    # where writing is allowed nothing changes: __pycache__ beside the sources
    assert _ask("-c", SHOW) == ["False", "None"]


def test_setup_installs_the_module_the_venv_runs():
    """The copy in .venv is this file (setup.sh copies it on every run)."""
    import radixlens_bytecode  # noqa: PLC0415 - installed by scripts/setup.sh

    assert Path(radixlens_bytecode.__file__).read_text() == \
        (ROOT / "scripts" / "venv_bytecode.py").read_text()


def _warm_module():
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("warm_bytecode",
                                                  ROOT / "scripts" / "warm_bytecode.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_warm_up_names_installed_packages_and_skips_what_fails(capsys):
    """scripts/warm_bytecode.py (setup.sh runs it after an install): every package it warms is
    installed (a renamed one would be skipped silently, run after run), and a module that fails
    to import is named on stderr without failing the setup."""
    import importlib.util  # noqa: PLC0415

    warm = _warm_module()
    tops = {name.split(".")[0] for group in warm.GROUPS for name in group}
    assert tops and all(importlib.util.find_spec(t) is not None for t in tops), tops
    warm.warm(["json", "radixlens_no_such_module"])
    err = capsys.readouterr().err
    assert "radixlens_no_such_module skipped: ModuleNotFoundError" in err
    assert "json" not in err.replace("radixlens_no_such_module", "")
