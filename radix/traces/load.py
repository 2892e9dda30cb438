"""Load any trace file: detect its format from the content, run that format's loader.

Four formats, one loader module each: request traces (`requests.py`), Mooncake block-hash traces
(`mooncake.py`), vLLM/SGLang KV-event recordings (`kv_events.py`), op traces (`ops.py`). Every
error is a `TraceError` naming the line and the field. Files are parsed as JSON or msgpack data
only: nothing is evaluated or unpickled. `limits` (radix/traces/base.py) bound what the file
expands to. Leaves out: other compressions, network sources.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace

from radix.traces.base import (
    DEFAULT_LIMITS,
    FORMATS,
    MAX_TOTAL_OUTPUT_TOKENS,
    Tally,
    Trace,
    TraceError,
    TraceLimits,
    decode_text,
    read_bytes,
)
from radix.traces.kv_events import load_kv_events
from radix.traces.mooncake import MAX_TOTAL_OUTPUT_TOKENS_COMPACT, load_mooncake, scan_totals
from radix.traces.ops import parse_ops
from radix.traces.requests import load_requests


def detect_format(data: bytes) -> str:
    """The format of a trace from its first bytes / first JSON line.

    >>> detect_format(b'{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}')
    'mooncake'
    """
    if data[:1] and (0x90 <= data[0] <= 0x9F or data[0] in (0xDC, 0xDD)):
        return "kv_events"  # msgpack: an EventBatch is an array (fixarray, array 16, array 32)
    first = data.lstrip().split(b"\n", 1)[0]
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):  # the loader names the line and what is wrong
        obj = None
    if isinstance(obj, list) or (isinstance(obj, dict) and ("events" in obj or "ts" in obj)):
        return "kv_events"
    if isinstance(obj, dict) and "op" in obj:
        return "ops"
    if isinstance(obj, dict) and ("hash_ids" in obj or "input_length" in obj):
        return "mooncake"
    return "request"  # and let the request loader say what is wrong


def load_trace(path_or_bytes: str | os.PathLike | bytes, *, fmt: str | None = None,
               tokenize: Callable[[str], list[int]] | None = None,
               chat_template: Callable[[list[dict]], list[int]] | None = None,
               max_bytes: int | None = None, max_tokens_per_request: int | None = None,
               limits: TraceLimits = DEFAULT_LIMITS) -> Trace:
    """Load any trace format (detected unless `fmt` is given), validated and within `limits`
    (`max_bytes` / `max_tokens_per_request`, when given, override those two of them).

    `tokenize` / `chat_template` turn "text" / "messages" into token ids; without them the
    deterministic fallback codec of `radix.traces.textcodec` is used.

    >>> t = load_trace(b'{"rid": "a", "arrival": 0, "tokens": [1, 2], "output_len": 3}')
    >>> t.format, t.requests[0].token_ids
    ('request', (1, 2))
    """
    if max_bytes is not None:
        limits = replace(limits, max_bytes=max_bytes)
    if max_tokens_per_request is not None:
        limits = replace(limits, max_tokens_per_request=max_tokens_per_request)
    data, name = read_bytes(path_or_bytes, limits.max_bytes)
    fmt = fmt or detect_format(data)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "kv_events":
        trace = load_kv_events(data)
    elif fmt == "ops":
        trace = Trace("ops", ops=parse_ops(decode_text(data), limits))
    elif fmt == "mooncake":
        text = decode_text(data)
        if limits.max_total_output_tokens == MAX_TOTAL_OUTPUT_TOKENS:  # the default: compact
            limits = replace(limits, max_total_output_tokens=MAX_TOTAL_OUTPUT_TOKENS_COMPACT)
        tally = Tally(limits)
        tally.check_lines(text, "max_requests", "requests")
        scan_totals(text, limits)  # the totals before any line is parsed
        trace = load_mooncake(text, limits.max_tokens_per_request, tally)
    else:
        trace = load_requests(decode_text(data), tokenize, chat_template, limits)
    trace.source = name
    return trace
