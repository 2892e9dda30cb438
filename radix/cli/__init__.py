"""The `python -m radix` command line: one subcommand per module, registered below.

Each command module defines `register(subparsers)`, which adds its parser and sets
`func=run` (a function taking the parsed args and returning an exit code). Bad input (a file, an
argument) prints one clear line to stderr (`error: FILE: line N, field "F": ...`, non-printable
characters escaped) and exits 2; it never shows a traceback. So does running out of memory (the
hint is the command's `memory_hint` default). A reader that stops reading (`| head`) ends the
command quietly, exit 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from radix.traces.fields import one_line

# (module, what it adds); modules are imported only when the CLI runs.
COMMAND_MODULES = (
    "radix.cli.demo",  # demo, replay
    "radix.cli.compare",  # compare
    "radix.cli.simulate",  # simulate, configs
    "radix.cli.watch",  # watch
    "radix.cli.explain",  # explain
    "radix.cli.why",  # why
    "radix.cli.rates",  # rates
    "radix.cli.cluster",  # cluster
    "radix.cli.sweep",  # sweep
)


class InputError(Exception):
    """Bad user input: the message names the file, line and field. Printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m radix", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = getattr(args, "trace", None) or getattr(args, "file", None)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # subtle: a closed pipe shows here, not at exit after the try
        return code
    except BrokenPipeError:  # the reader stopped reading (`| head`): nothing more to say
        _stdout_to_devnull()
        return 0
    except (InputError, ValueError, OSError) as exc:
        message = str(exc)
    except MemoryError as exc:  # a real one has no text; the scheduler's says which pool
        hint = getattr(args, "memory_hint", "try a smaller trace or a smaller --capacity")
        message = f"out of memory: {str(exc) or hint}"
    if path and str(path) not in message and not message.startswith("--"):
        message = f"{path}: {message}"  # name the file as well as the line and field
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 2


def _stdout_to_devnull() -> None:
    """Points stdout at /dev/null, so flushing it at exit raises no second BrokenPipeError."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # no real descriptor (a test's capture)
        pass
