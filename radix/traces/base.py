"""What every trace loader shares: `Trace`, `TraceRequest`, `TraceError`, reading and field checks.

Four formats (schemas in the loader modules): (a) request traces, JSONL (`trace_request.py`);
(b) Mooncake block-hash traces (`trace_mooncake.py`); (c) vLLM/SGLang KV-event recordings,
msgpack or JSON lines (`trace_kvevents.py`); (d) op traces, delegated to `radix.traces.ops`.
Every error is a `TraceError` naming the line and the field. Files are parsed as JSON or msgpack
data only: nothing is evaluated or unpickled. Any of them may be gzipped (.gz), decompressed
under the same size cap. Leaves out: other compressions, network sources.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from radix.request import Req

MAX_BYTES = 64 * 1024 * 1024  # default cap on a trace file's size
MAX_TOKENS_PER_REQUEST = 1 << 20  # default cap on one request's prompt (real tokens)
MAX_TOKEN_ID = (1 << 31) - 1  # token ids are 0..MAX_TOKEN_ID
MAX_OUTPUT_LEN = 1 << 20  # output_len / output_length cap
MAX_SECONDS = 1e9  # arrival cap (about 31 years)
MAX_DEPTH = 32  # JSON nesting cap: deeper is junk, and would recurse deeply
# What a whole trace may expand to, checked while loading (each refusal names the limit):
MAX_REQUESTS = 1 << 20  # requests in one trace
MAX_TOTAL_TOKENS = 1 << 28  # prompt tokens of all requests together (real tokens, 268 M)
MAX_TOTAL_OUTPUT_TOKENS = 1 << 28  # output tokens (output_len) of all requests together
FORMATS = ("request", "mooncake", "kv_events", "ops")


class TraceError(ValueError):
    """A bad trace file. The message names the line (1-based) and the field, e.g.
    `line 7, field "tokens": expected a list of ints, got str`."""

    def __init__(self, message: str, line: int | None = None, field: str | None = None):
        where = []
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f'field "{field}"')
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.message = message  # the message without the line and field
        self.line = line  # 1-based line number, or None when the error is about the whole file
        self.field = field  # the offending field, or None


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace, in the trace's token unit (see `Trace.token_scale`)."""

    rid: str  # request id, unique in the trace
    arrival: float  # seconds since the trace's start
    token_ids: tuple[int, ...]  # the prompt
    output_len: int  # tokens to generate (always real tokens)
    extra_key: str | None = None  # namespace (LoRA id etc.): different keys never share cache
    cache_salt: str | None = None  # per-tenant salt; also a namespace
    priority: int = 0  # larger is more important
    output_ids: tuple[int, ...] | None = None  # the reply a simulated run generates (recorded
    # conversations: so the next turn's prompt, which contains it, can hit the cached reply)


@dataclass
class Trace:
    """A loaded trace. `requests` are in arrival order (stable for equal arrivals)."""

    format: str  # one of FORMATS
    requests: list[TraceRequest] = field(default_factory=list)
    token_scale: int = 1  # real tokens per unit token: 1, or 512 for a Mooncake block-unit trace
    input_lens: list[int] = field(default_factory=list)  # real prompt length of each request
    batches: list[Any] = field(default_factory=list)  # kv_events: decoded EventBatch objects
    ops: Any = None  # ops: whatever radix.traces.ops.load_ops returned
    source: str = "<bytes>"  # the file name, for messages

    def real_prefix_len(self, index: int, num_units: int) -> int:
        """Real tokens in the first `num_units` unit tokens of request `index`.

        >>> t = Trace("mooncake", token_scale=512, input_lens=[1100])
        >>> t.real_prefix_len(0, 2), t.real_prefix_len(0, 3)  # 2*512; the last block is partial
        (1024, 1100)
        """
        return min(num_units * self.token_scale, self.input_lens[index])


def to_req(tr: TraceRequest) -> Req:
    """A fresh `Req` for the schedulers and caches.

    >>> to_req(TraceRequest("r1", 0.5, (1, 2, 3), 4)).origin_input_ids
    [1, 2, 3]
    """
    return Req(rid=tr.rid, origin_input_ids=list(tr.token_ids), max_new_tokens=tr.output_len,
               extra_key=tr.extra_key, cache_salt=tr.cache_salt, priority=tr.priority,
               arrival=tr.arrival)


# ---------------------------------------------------------------- reading and detecting

def read_bytes(path_or_bytes: str | os.PathLike | bytes, max_bytes: int) -> tuple[bytes, str]:
    """The raw (gunzipped) bytes and a display name; a path is read at most `max_bytes` + 1 far."""
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        data, name = bytes(path_or_bytes), "<bytes>"
    else:
        name = os.fspath(path_or_bytes)
        with open(name, "rb") as f:
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TraceError(f"file is larger than the {max_bytes:,}-byte cap (max_bytes)")
    if data[:2] == b"\x1f\x8b":  # gzip; decompressed under the same cap (no zip bombs)
        inflater = zlib.decompressobj(wbits=31)
        try:
            data = inflater.decompress(data, max_bytes + 1)
        except zlib.error as exc:
            raise TraceError(f"broken gzip data: {exc}") from None
        if len(data) > max_bytes or inflater.unconsumed_tail:
            raise TraceError(f"file decompresses past the {max_bytes:,}-byte cap (max_bytes)")
        if not inflater.eof:
            raise TraceError("truncated gzip data")
    if not data.strip():
        raise TraceError("file is empty")
    return data, name


def decode_text(data: bytes) -> str:
    """UTF-8 text, or a TraceError naming the line of the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceError(f"not UTF-8 text (bad byte at offset {exc.start})", line) from None
    bad = text.find("\x00")
    if bad >= 0:
        raise TraceError("binary data (a NUL byte): not a text trace nor a msgpack stream",
                         text.count("\n", 0, bad) + 1)
    return text.removeprefix("\ufeff")


def iter_json_lines(text: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; bad JSON names its line.

    >>> list(iter_json_lines('{"a": 1}\\n\\n[2]\\n'))
    [(1, {'a': 1}), (3, [2])]
    """
    lines = text.split("\n")
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)  # NaN / Infinity parse; the field checks refuse them
        except (ValueError, RecursionError) as exc:
            last = i == len(lines) or all(not s.strip() for s in lines[i:])
            hint = " (truncated line?)" if last and not text.endswith("\n") else ""
            raise TraceError(f"not valid JSON{hint}: {str(exc)[:80]}", i) from None
        if _depth(value) > MAX_DEPTH:
            raise TraceError(f"JSON nested deeper than {MAX_DEPTH} levels", i)
        yield i, value


def _depth(value: Any) -> int:
    stack, best = [(value, 1)], 0
    while stack:
        v, d = stack.pop()
        best = max(best, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v if isinstance(x, list | dict))
    return best


# ---------------------------------------------------------------- field helpers

def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def need(obj: dict, key: str, line: int) -> Any:
    """obj[key], or a TraceError saying the field is missing."""
    if key not in obj:
        raise TraceError("missing", line, key)
    return obj[key]


def as_int(value: Any, line: int, key: str, lo: int = 0, hi: int = MAX_TOKEN_ID) -> int:
    """An int in [lo, hi]; bools and floats are refused (`true` is not a length)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"expected an int, got {type_name(value)}", line, key)
    if not lo <= value <= hi:
        raise TraceError(f"{value} is out of range [{lo:,}, {hi:,}]", line, key)
    return value


def as_number(value: Any, line: int, key: str, lo: float = 0.0, hi: float = MAX_SECONDS) -> float:
    """A finite number in [lo, hi] as a float; bools are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"expected a number, got {type_name(value)}", line, key)
    if isinstance(value, int) and abs(value) > 2 ** 63:
        raise TraceError("number is too large", line, key)
    if not math.isfinite(value):
        raise TraceError(f"{value} is not a finite number", line, key)
    if not lo <= value <= hi:
        raise TraceError(f"{value} is out of range [{lo:g}, {hi:g}]", line, key)
    return float(value)


def as_opt_str(value: Any, line: int, key: str, max_len: int = 256) -> str | None:
    """None or a string of at most `max_len` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TraceError(f"expected a string or null, got {type_name(value)}", line, key)
    if len(value) > max_len:
        raise TraceError(f"string longer than {max_len} characters", line, key)
    return value


def as_int_list(value: Any, line: int, key: str, max_len: int, hi: int = MAX_TOKEN_ID) -> tuple:
    """A tuple of ints in [0, hi], at most `max_len` long."""
    if not isinstance(value, list):
        raise TraceError(f"expected a list of ints, got {type_name(value)}", line, key)
    if len(value) > max_len:
        raise TraceError(f"{len(value):,} items exceed the cap of {max_len:,}"
                         " (max_tokens_per_request)", line, key)
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
            what = type_name(v) if not isinstance(v, int) or isinstance(v, bool) else str(v)
            raise TraceError(f"item {i} is {what}; expected an int in [0, {hi:,}]", line, key)
    return tuple(value)
