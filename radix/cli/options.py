"""Options every trace command shares, defined once: the KV capacity and the trace limits.

`add_capacity(parser)` gives a command `--capacity`: a whole number of real tokens >= 1, or
`unbounded` (room for the whole trace: nothing is ever evicted). The default is unbounded for
every command (`DEFAULT_CAPACITY`), so `compare`, `simulate`, `configs` and `explain` give the
same hit rate on the same trace unless told otherwise. `add_limits(parser)` gives `--limit
NAME=VALUE` (radix/traces/limits.py's TraceLimits fields) so a user can raise what a trace may
hold. A bad value is an argparse error naming the option, never blamed on the trace file.
`check_writable(path, flag)` refuses an output path before a long run, not after it; `shown`
is a trace's own text (a rid, a namespace) made safe for a terminal.
Leaves out: per-command options.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from radix.traces.fields import one_line
from radix.traces.limits import DEFAULT_LIMITS, LIMIT_NAMES, TraceLimits, limit_item

UNBOUNDED = "unbounded"  # how --capacity says "room for the whole trace"
DEFAULT_CAPACITY: int | None = None  # None = unbounded; one default for every command
CAPACITY_HELP = ("KV capacity in real tokens: a whole number >= 1, or 'unbounded' (room for the "
                 "whole trace, nothing evicted). Default: unbounded")


def parse_capacity(text: str) -> int | None:
    """`--capacity`'s value: tokens, or None for unbounded.

    >>> parse_capacity("65_536"), parse_capacity("Unbounded")
    (65536, None)
    """
    if text.strip().lower() == UNBOUNDED:
        return None
    try:
        value = int(text.replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--capacity must be a whole number of tokens or '{UNBOUNDED}', got {text!r}"
        ) from None
    if value < 1:  # 0 slots admit nothing: every request would be rejected
        raise argparse.ArgumentTypeError(
            f"--capacity must be >= 1 token (or '{UNBOUNDED}'), got {value}: a pool of "
            f"{value} slots admits no request")
    return value


def add_capacity(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--capacity", type=parse_capacity, default=DEFAULT_CAPACITY,
                        metavar="TOKENS|unbounded", help=CAPACITY_HELP)


def capacity_label(capacity: int | None) -> str:
    """capacity_label(None) == 'unbounded'; capacity_label(65536) == '65,536 tokens'."""
    return UNBOUNDED if capacity is None else f"{capacity:,} tokens"


def parse_limit(text: str) -> tuple[str, int]:
    """`--limit NAME=VALUE` -> (name, value) (radix/traces/limits.py's `limit_item`).

    >>> parse_limit("max_total_output_tokens=1e8")
    ('max_total_output_tokens', 100000000)
    """
    try:
        return limit_item(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--limit: {exc}") from None


def add_limits(parser: argparse.ArgumentParser) -> None:
    defaults = ", ".join(f"{n}={getattr(DEFAULT_LIMITS, n):,}" for n in LIMIT_NAMES)
    parser.add_argument("--limit", type=parse_limit, action="append", default=[],
                        metavar="NAME=VALUE",
                        help=f"raise (or lower) a limit on what the trace may hold; repeatable. "
                             f"Defaults: {defaults} (Mooncake traces: max_total_output_tokens="
                             f"16,777,216)")


def limits_from(args: Any) -> TraceLimits:
    """The TraceLimits the command's `--limit` options ask for."""
    return dataclasses.replace(DEFAULT_LIMITS, **dict(getattr(args, "limit", None) or []))


def load_request_trace(args: Any, command: str) -> Any:
    """`args.trace` loaded within `--limit`s, as a request or Mooncake trace: anything else,
    or a bad line, is an InputError naming the file (and the line and field)."""
    from radix.cli import InputError
    from radix.traces import TraceError, load_trace

    try:
        trace = load_trace(args.trace, limits=limits_from(args))
    except TraceError as exc:
        hint = re.search(r"over the limit of [\d,]+ \((max_\w+)\)", str(exc))
        more = f"; raise it with --limit {hint[1]}=N" if hint else ""
        raise InputError(f"{args.trace}: {exc}{more}") from None
    if trace.format not in ("request", "mooncake"):  # nothing to schedule: say so
        raise InputError(f"{args.trace}: {command} needs a request or Mooncake trace, got a "
                         f"{trace.format} trace")
    return trace


def parse_jobs(text: str) -> int:
    """`--jobs`: worker processes, a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs must be a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be >= 1, got {n}")
    return n


class StderrProgress:
    """`progress(fraction, text)` for long commands: one line on stderr when the stage changes
    (the text before its first ':') or `every` seconds have passed, so a run of minutes says
    where it is without flooding a log."""

    def __init__(self, command: str, every: float = 10.0, clock: Any = None) -> None:
        import time

        self.command, self.every = command, every
        self.clock = clock or time.monotonic
        self.stage, self.last = None, float("-inf")

    def __call__(self, fraction: float, text: str) -> None:
        import sys

        stage, now = text.split(":", 1)[0], self.clock()
        if stage == self.stage and now - self.last < self.every:
            return
        self.stage, self.last = stage, now
        print(f"{self.command}: {fraction:.0%} {text}", file=sys.stderr, flush=True)


def check_writable(path: str, flag: str) -> None:
    """ValueError naming `flag` when `path` cannot be written: a folder, in a folder that does
    not exist, or not writable (checked before a command's work starts, not after).

    >>> check_writable("/nonexistent/x.jsonl", "--out")
    Traceback (most recent call last):
    ...
    ValueError: --out /nonexistent/x.jsonl: the folder /nonexistent does not exist
    """
    p = Path(path)
    folder = p.parent
    if p.is_dir():
        raise ValueError(f"{flag} {path}: is a folder, not a file")
    if not folder.is_dir():
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(p if p.exists() else folder, os.W_OK):
        raise ValueError(f"{flag} {path}: not writable")


def shown(text: object, max_chars: int = 200) -> str:
    r"""A trace's own text for the terminal: escape sequences, CR, BEL and the rest of what is
    not printable written as escapes, at most `max_chars` characters.

    >>> print(shown("r1\x1b[2J\r\x07"))
    r1\x1b[2J\r\x07
    """
    return one_line(str(text), max_chars)
