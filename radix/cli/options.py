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
# ---------------------------------------------------------------- --model (hybrid models)
MODEL_HELP = ("a model preset (qwen3.5-4b, qwen3-next-80b-a3b, gpt-oss-20b, gemma-3-27b, "
              "nemotron-h-8b, llama-3-8b) or a Hugging Face config.json: run the trace on both "
              "engines' caches for that model (SGLang's component tree, vLLM's hybrid block "
              "cache; see docs/HYBRID.md)")


def parse_kv_memory(text: str) -> int | None:
    """`--kv-memory`'s value: GiB of KV cache (a number > 0), or None for unbounded.

    >>> parse_kv_memory("40"), parse_kv_memory("0.5"), parse_kv_memory("unbounded")
    (42949672960, 536870912, None)
    """
    if text.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(text.replace(",", "").lower().removesuffix("gib"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--kv-memory must be GiB (a number > 0) or '{UNBOUNDED}', got {text!r}") from None
    if not value > 0 or value > 1 << 20:
        raise argparse.ArgumentTypeError(f"--kv-memory must be > 0 and at most 1,048,576 GiB, "
                                         f"got {text!r}")
    return int(value * (1 << 30))


def add_model(parser: argparse.ArgumentParser) -> None:
    """--model and the assumptions that change a hybrid model's answer, by the engines' flag
    names, defaulting to each engine's choice on an H100 (radix/models/engines.py)."""
    from radix.models.engines import DEFAULT_KV_MEMORY, MAMBA_CACHE_MODES
    from radix.models.vllm import ATTENTION_BACKENDS, GDN_PREFILL_BACKENDS
    from radix.tree.hybrid_args import STRATEGIES

    g = parser.add_argument_group("hybrid models (with --model)")
    g.add_argument("--model", metavar="PRESET|config.json", default=None, help=MODEL_HELP)
    g.add_argument("--kv-memory", type=parse_kv_memory, default=DEFAULT_KV_MEMORY,
                   metavar="GIB|unbounded",
                   help=f"GPU memory for the KV cache, each engine splitting it its own way "
                        f"(default {DEFAULT_KV_MEMORY >> 30}; '{UNBOUNDED}': room for the "
                        "whole trace). Replaces --capacity")
    g.add_argument("--attention-backend", choices=tuple(ATTENTION_BACKENDS),
                   default="FLASH_ATTN", help="vLLM's attention backend (default FLASH_ATTN)")
    g.add_argument("--gdn-prefill-backend", choices=tuple(GDN_PREFILL_BACKENDS),
                   default="flashinfer", help="vLLM's GDN prefill kernel: flashinfer (H100, "
                   "block 576 for Qwen3.5) or triton (block 528)")
    g.add_argument("--mamba-cache-mode", choices=MAMBA_CACHE_MODES, default="align",
                   help="vLLM's mamba_cache_mode (none: no prefix caching)")
    g.add_argument("--mamba-radix-cache-strategy", choices=STRATEGIES, default="auto",
                   help="SGLang's Mamba strategy (auto: extra_buffer with the overlap "
                        "scheduler, no_buffer without)")
    g.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang without the overlap scheduler (auto then picks no_buffer)")


LONG_RUN = 2000  # requests: a --model run of about a minute or more says where it is


def model_progress(command: str, trace: Any, quiet: bool = False) -> Any:
    """A StderrProgress for a --model run over a long trace (LONG_RUN requests or more)."""
    if quiet or len(trace.requests) < LONG_RUN:
        return None
    return StderrProgress(command)


def model_from(args: Any) -> tuple[Any, Any] | None:
    """(ModelPreset, EngineAssumptions) when the command was given --model, else None; a bad
    preset or config, or --capacity beside --model, is an InputError naming it."""
    from radix.cli import InputError
    from radix.models import ConfigError, load_preset
    from radix.models.engines import EngineAssumptions

    if getattr(args, "model", None) is None:
        d = EngineAssumptions()
        defaults = {"kv_memory": d.kv_memory_bytes, "attention_backend": d.attention_backend,
                    "gdn_prefill_backend": d.gdn_prefill_backend,
                    "mamba_cache_mode": d.mamba_cache_mode,
                    "mamba_radix_cache_strategy": d.mamba_radix_cache_strategy,
                    "disable_overlap_schedule": d.disable_overlap_schedule}
        given = [f"--{k.replace('_', '-')}" for k, v in defaults.items()
                 if getattr(args, k, v) != v]
        if given:
            raise InputError(f"{', '.join(given)}: only with --model")
        return None
    try:
        preset = load_preset(args.model)
    except ConfigError as exc:
        raise InputError(f"--model {exc}") from None
    if getattr(args, "capacity", None) is not None:
        raise InputError("--capacity counts the tokens of one full-attention cache; with "
                         "--model give --kv-memory GIB (each engine splits it its own way)")
    block = getattr(args, "block_size", None)
    chunk = getattr(args, "chunk", None)
    try:
        a = EngineAssumptions(
            attention_backend=args.attention_backend,
            gdn_prefill_backend=args.gdn_prefill_backend, mamba_cache_mode=args.mamba_cache_mode,
            block_size=None if block in (None, 16) else block,
            mamba_radix_cache_strategy=args.mamba_radix_cache_strategy,
            disable_overlap_schedule=args.disable_overlap_schedule,
            page_size=getattr(args, "page_size", None) or 1, kv_memory_bytes=args.kv_memory,
            **({"chunked_prefill_size": chunk} if chunk else {}))
        from radix.models.engines import sglang_server_args
        sglang_server_args(preset, a)  # no_buffer with pages > 1 and such: said now
    except ValueError as exc:
        raise InputError(f"--model {args.model}: {exc}") from None
    return preset, a
