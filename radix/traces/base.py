"""Load any trace file: the format detection and `load_trace`, which hands the bytes to the
format's loader and returns its `Trace` (trace.py).

Four formats: (a) request traces, the project's own (requests.py); (b) Mooncake block-hash
traces (mooncake.py); (c) vLLM/SGLang KV-event recordings, msgpack or JSON lines
(kv_events.py); (d) op traces (ops.py). Any of them may be gzipped (reading.py), every error is
a one-line TraceError naming the line and the field (fields.py), and what a file may expand to
is bounded by `TraceLimits` (limits.py). Leaves out: other compressions, network sources.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace

from radix.traces.fields import TraceError
from radix.traces.kv_events import read_kv_events
from radix.traces.limits import DEFAULT_LIMITS, TraceLimits
from radix.traces.mooncake import read_mooncake
from radix.traces.ops import read_ops
from radix.traces.reading import decode_text, read_bytes
from radix.traces.requests import load_requests
from radix.traces.trace import FORMATS, Trace


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


# The other formats' loaders, (file bytes, limits) -> Trace (a request trace also takes a
# tokenizer: load_trace calls load_requests itself).
LOADERS: dict[str, Callable[[bytes, TraceLimits], Trace]] = {
    "mooncake": read_mooncake, "kv_events": read_kv_events, "ops": read_ops}


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
    ('request', [1, 2])
    """
    if max_bytes is not None:
        limits = replace(limits, max_bytes=max_bytes)
    if max_tokens_per_request is not None:
        limits = replace(limits, max_tokens_per_request=max_tokens_per_request)
    data, name = read_bytes(path_or_bytes, limits.max_bytes)
    fmt = fmt or detect_format(data)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "request":
        trace = load_requests(decode_text(data), tokenize, chat_template, limits)
    else:
        trace = LOADERS[fmt](data, limits)
    trace.source = name
    return trace
