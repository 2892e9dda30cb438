"""What every differential tool shares: SGLang's or vLLM's own modules loaded by path, and the run.

A tool loads a few source files from an unpacked wheel (`load`) after stubbing what they import:
empty packages (`packages`), MagicMock modules (`mocks`), modules whose every attribute is a
fresh class (`AnyClasses`, `stub`). `wheel_args` parses the shared command line (the wheel's
folder, --seeds) and checks the wheel holds the file the tool needs; `run_seeds` runs one check
per case, prints each MISMATCH and counts. Leaves out: anything that would need a GPU stack; the
stubs go only as deep as the tools need.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import traceback
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from unittest import mock


def load(name: str, path: Path) -> types.ModuleType:
    """Executes the file at `path` as module `name` (registered first, so it may import itself)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def packages(*names: str) -> None:
    """Empty packages, so that submodules can be loaded or stubbed beneath them."""
    for name in names:
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []


def mocks(*names: str) -> None:
    """Modules whose every attribute (and call) is a MagicMock."""
    for name in names:
        sys.modules[name] = mock.MagicMock(name=name)


class AnyClasses(types.ModuleType):
    """A stub module whose every attribute is a fresh class (isinstance, `|` and hints work)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (), {})
        setattr(self, name, cls)
        return cls


def stub(name: str, **attrs) -> types.ModuleType:
    """An AnyClasses package named `name`, with `attrs` set on it, registered in sys.modules."""
    module = AnyClasses(name)
    module.__path__ = []
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def wheel_parser(doc: str, package: str, seeds: int | None = None) -> argparse.ArgumentParser:
    """The tools' command line: the folder holding the unpacked `package`, and --seeds."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("root", metavar=f"{package}_root", type=Path,
                    help=f"folder holding the unpacked {package} package")
    if seeds is not None:
        ap.add_argument("--seeds", type=int, default=seeds)
    return ap


def wheel_args(ap: argparse.ArgumentParser, marker: str) -> argparse.Namespace:
    """Parses the command line; one clear line if the wheel lacks the file `marker`."""
    args = ap.parse_args()
    if not (args.root / marker).exists():
        ap.error(f"{args.root}: no {marker} there")
    return args


def run_seeds(check: Callable[..., int], cases: Iterable[tuple]) -> tuple[int, int]:
    """(sum of check(*case) over the cases, cases that failed). A failing case, an assertion or
    either side raising, prints one MISMATCH (a traceback unless it is an assertion)."""
    total = failures = 0
    for case in cases:
        try:
            total += check(*case)
        except Exception as exc:  # an assertion, or either side raising
            failures += 1
            print("MISMATCH", exc if isinstance(exc, AssertionError) else traceback.format_exc())
    return total, failures
