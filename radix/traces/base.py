"""Load any trace file: `Trace`, `TraceError`, the limits, reading, field checks, the format
detection and `load_trace`, and the request format (a), the project's own, read and written here.

The other formats live in their modules, put into `LOADERS` by radix/traces/__init__.py (they
import this one): (b) Mooncake block-hash traces (`mooncake.py`); (c) vLLM/SGLang KV-event
recordings, msgpack or JSON lines (`kv_events.py`); (d) op traces (`ops.py`). Every error is a
one-line `TraceError` naming the line and the field. Files are parsed as JSON (RFC 8259) or
msgpack data only: nothing is evaluated or unpickled. Any of them may be gzipped (every member
is read) under the same size cap. The MAX_* constants below are the default limits;
`TraceLimits` (with `Tally`, which counts a trace line by line while loading and refuses the
line that crosses a limit, naming the limit and the figure) bounds what a file expands to: a
6 KB request trace may ask for a million output tokens per request, which the file-size cap
does not see. Format (a) follows the shape of an OpenAI request plus SGLang's extra_key /
cache_salt. Leaves out: other compressions, network sources, time limits (a bounded trace
replays in bounded time); sampling parameters, images and tool calls in messages.
"""

from __future__ import annotations

import json
import math
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from radix.request import Req
from radix.tokens import RunList, TokenRuns, Tokens, is_compact
from radix.traces import textcodec

MAX_BYTES = 64 * 1024 * 1024  # a trace file's size (after gunzip)
MAX_TOKENS_PER_REQUEST = 1 << 20  # one request's prompt (real tokens)
MAX_TOKEN_ID = (1 << 31) - 1  # token ids are 0..MAX_TOKEN_ID
MAX_OUTPUT_LEN = 1 << 20  # one request's output_len / output_length
MAX_SECONDS = 1e9  # arrival cap (about 31 years)
MAX_DEPTH = 32  # JSON nesting cap: deeper is junk, and would recurse deeply
# What a whole trace may expand to (TraceLimits' defaults; the app passes its session budget):
MAX_TOTAL_TOKENS = 1 << 25  # 33,554,432 prompt tokens of all requests, in the trace's token
# unit (a Mooncake hash id is one); for op traces, the tokens of all ops' lists
MAX_TOTAL_OUTPUT_TOKENS = 1 << 21  # 2,097,152 output tokens of all requests (each is a decode
# step in `simulate` and a token id held by `compare`)
MAX_REQUESTS = 1 << 17  # 131,072 requests of a request or Mooncake trace
MAX_OPS = 1 << 20  # 1,048,576 ops of an op trace
MAX_ERROR_CHARS = 400  # a TraceError's text, at most
FORMATS = ("request", "mooncake", "kv_events", "ops")


def one_line(text: str, max_chars: int = MAX_ERROR_CHARS) -> str:
    r"""`text` safe to print as one line: what is not printable (newlines, U+2028, lone
    surrogates, ...) as escapes, at most `max_chars` characters.

    >>> print(one_line("rid" + chr(10) + "x" + chr(0x2028) + chr(0xD800)))
    rid\nx\u2028\ud800
    """
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                       for c in text)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


class TraceError(ValueError):
    """A bad trace file. The message names the line (1-based) and the field, e.g.
    `line 7, field "tokens": expected a list of ints, got str`; always one printable line."""

    def __init__(self, message: str, line: int | None = None, field: str | None = None):
        where = []
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f'field "{one_line(field, 80)}"')
        super().__init__(one_line(f"{', '.join(where)}: {message}" if where else message))
        self.message = message  # the message without the line and field
        self.line = line  # 1-based line number, or None when the error is about the whole file
        self.field = field  # the offending field, or None


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace, in the trace's token unit (see `Trace.token_scale`)."""

    rid: str  # request id, unique in the trace
    arrival: float  # seconds since the trace's start
    token_ids: Tokens  # the prompt (a list, or TokenRuns for a compact trace: radix/tokens/),
    # shared with the Req, the tree and its events: never mutated
    output_len: int  # tokens to generate (always real tokens)
    extra_key: str | None = None  # namespace (LoRA id etc.): different keys never share cache
    cache_salt: str | None = None  # per-tenant salt; also a namespace
    priority: int = 0  # larger is more important
    output_ids: tuple[int, ...] | None = None  # the reply a simulated run generates (recorded
    # conversations: so the next turn's prompt, which contains it, can hit the cached reply)

    __hash__ = None  # type: ignore[assignment]  # compared, never hashed: token_ids is a list


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


OUTPUT_BASE = 1 << 40  # synthetic output tokens: OUTPUT_BASE + (request index << 20) + j
COMPACT_OUTPUT_BASE = 1 << 63  # for compact traces, above every Mooncake token (< 2**63)


def to_req(tr: TraceRequest) -> Req:
    """A fresh `Req` for the schedulers and caches, in real tokens, over the trace's own prompt
    (`Tokens`, no copy): a compact prompt (TokenRuns, Mooncake) stays compact, and so do its rows
    (output_ids, slot_ids are RunLists).

    >>> tr = TraceRequest("r1", 0.5, [1, 2, 3], 4); to_req(tr).origin_input_ids is tr.token_ids
    True
    """
    compact = is_compact(tr.token_ids)
    req = Req(tr.rid, tr.token_ids,
              max_new_tokens=tr.output_len, extra_key=tr.extra_key, cache_salt=tr.cache_salt,
              priority=tr.priority, arrival=tr.arrival)
    if compact:
        req.output_ids, req.slot_ids = RunList(), RunList()
    return req


def trace_reqs(trace: Trace) -> list[Req]:
    """Fresh Reqs for every request of the trace (`to_req`): what compare.py, sim.py and
    explain.py feed the caches, so that all three see the same tokens.

    >>> t = Trace("request", [TraceRequest("a", 0, [5, 6], 1)])
    >>> [r.origin_input_ids for r in trace_reqs(t)]
    [[5, 6]]
    """
    return [to_req(tr) for tr in trace.requests]


def is_compact_trace(trace: Trace) -> bool:
    """True when the trace's prompts are TokenRuns (Mooncake), so rows must stay compact."""
    return bool(trace.requests) and is_compact(trace.requests[0].token_ids)


def output_tokens(trace: Trace, index: int) -> Sequence[int]:
    """The reply of request `index`: the trace's own when recorded, else distinct synthetic ids
    no prompt uses: a `range` for plain traces, one TokenRuns run for compact ones, never a list
    built up front.

    >>> t = Trace("request", [TraceRequest("a", 0, (5,), 3)])
    >>> output_tokens(t, 0) == range(OUTPUT_BASE, OUTPUT_BASE + 3)
    True
    """
    tr = trace.requests[index]
    if tr.output_ids:
        return list(tr.output_ids[:tr.output_len])
    if is_compact(tr.token_ids):
        return TokenRuns([(COMPACT_OUTPUT_BASE + (index << 21), tr.output_len)])
    start = OUTPUT_BASE + (index << 20)
    return range(start, start + tr.output_len)


# ---------------------------------------------------------------- reading

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
    if data[:2] == b"\x1f\x8b":
        data = gunzip(data, max_bytes)
    if not data.strip():
        raise TraceError("file is empty")
    return data, name


def gunzip(data: bytes, max_bytes: int) -> bytes:
    r"""Every member of a gzip file (`cat a.gz b.gz` is one valid file), at most `max_bytes` in
    all (no zip bombs); NUL padding after the last member is ignored, as gzip(1) ignores it.

    >>> import gzip
    >>> gunzip(gzip.compress(b"a\n") + gzip.compress(b"b\n"), 100)
    b'a\nb\n'
    """
    parts, total, rest = [], 0, data
    while True:
        inflater = zlib.decompressobj(wbits=31)
        try:
            part = inflater.decompress(rest, max_bytes - total + 1)
        except zlib.error as exc:
            raise TraceError(f"broken gzip data (member {len(parts) + 1}): {exc}") from None
        total += len(part)
        if total > max_bytes or inflater.unconsumed_tail:
            raise TraceError(f"file decompresses past the {max_bytes:,}-byte cap (max_bytes)")
        if not inflater.eof:
            raise TraceError(f"truncated gzip data (member {len(parts) + 1})")
        parts.append(part)
        rest = inflater.unused_data
        if not rest.strip(b"\x00"):
            return b"".join(parts)
        if rest[:2] != b"\x1f\x8b":
            raise TraceError(f"{len(rest):,} bytes after gzip member {len(parts)} are not gzip")


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
    r"""(line number, parsed value) for every non-blank line; bad JSON names its line.

    Lines end at "\n" only (JSON Lines): a raw U+2028 inside a string is text, as RFC 8259 says.
    Nesting deeper than MAX_DEPTH is refused, also where the parser would run out of stack.

    >>> list(iter_json_lines('{"a": 1}\n\n[2]\n'))
    [(1, {'a': 1}), (3, [2])]
    """
    lines = text.split("\n")
    for i, raw in enumerate(lines, start=1):
        raw = raw.strip(" \t\r")  # JSON's whitespace ("\n" split already)
        if not raw:
            continue
        try:
            value, end = _DECODER.raw_decode(raw)  # NaN / Infinity parse; field checks refuse them
        except RecursionError:
            raise TraceError(f"JSON nested deeper than {MAX_DEPTH} levels", i) from None
        except ValueError as exc:
            raise _json_error(exc, i, lines, text) from None
        if end != len(raw):
            raise TraceError(f"not valid JSON: extra data after the value at column {end + 1}", i)
        if raw.count("[") + raw.count("{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
            raise TraceError(f"JSON nested deeper than {MAX_DEPTH} levels", i)
        yield i, value


_DECODER = json.JSONDecoder()


def _json_error(exc: ValueError, i: int, lines: list[str], text: str) -> TraceError:
    if "Exceeds the limit" in str(exc):  # int("9" * 5000): CPython's int_max_str_digits
        return TraceError(f"not valid JSON: a number of more than {sys.get_int_max_str_digits():,}"
                          " digits", i)
    last = i == len(lines) or all(not s.strip() for s in lines[i:])
    hint = " (truncated line?)" if last and not text.endswith("\n") else ""
    return TraceError(f"not valid JSON{hint}: {str(exc)[:80]}", i)


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
    """None or a string of at most `max_len` characters, valid Unicode (`check_text`)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TraceError(f"expected a string or null, got {type_name(value)}", line, key)
    if len(value) > max_len:
        raise TraceError(f"a string of {len(value):,} characters; the limit is {max_len:,}",
                         line, key)
    return check_text(value, line, key)


def check_text(value: str, line: int | None, key: str | None) -> str:
    r"""`value` if it is valid Unicode. A lone surrogate ("\ud800" parses as JSON; RFC 8259 8.2
    calls it unpredictable) cannot be UTF-8: tokenizers and printing would fail on it later.

    >>> check_text("ok" + chr(0x2028), 1, "rid") == "ok" + chr(0x2028)
    True
    >>> check_text("x" + chr(0xD800), 3, "rid")
    Traceback (most recent call last):
    ...
    radix.traces.base.TraceError: line 3, field "rid": a lone surrogate U+D800 at character 1 ...
    """
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TraceError(f"a lone surrogate U+{ord(value[exc.start]):04X} at character "
                         f"{exc.start:,} is not valid Unicode text", line, key) from None
    return value


def as_int_list(value: Any, line: int, key: str, max_len: int, hi: int = MAX_TOKEN_ID) -> tuple:
    """A tuple of ints in [0, hi], at most `max_len` long."""
    return tuple(checked_ints(value, line, key, max_len, hi))


def checked_ints(value: Any, line: int, key: str, max_len: int,
                 hi: int = MAX_TOKEN_ID) -> list[int]:
    """`value` itself, checked to be a list of ints in [0, hi], at most `max_len` long."""
    if not isinstance(value, list):
        raise TraceError(f"expected a list of ints, got {type_name(value)}", line, key)
    if len(value) > max_len:
        raise TraceError(f"{len(value):,} items exceed the cap of {max_len:,}"
                         " (max_tokens_per_request)", line, key)
    if not ints_in_range(value, 0, hi):
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                what = type_name(v) if not isinstance(v, int) or isinstance(v, bool) else str(v)
                raise TraceError(f"item {i} is {what}; expected an int in [0, {hi:,}]", line, key)
    return value


def ints_in_range(values: list, lo: int, hi: int) -> bool:
    """True when every item is an int (not a bool) in [lo, hi]; C-speed (type set, min, max),
    so a million-token list costs milliseconds. The slow loop runs only to name a bad item.

    >>> ints_in_range([1, 2], 0, 9), ints_in_range([1, True], 0, 9), ints_in_range([], 0, 9)
    (True, False, True)
    """
    if not values:
        return True
    return set(map(type, values)) == {int} and lo <= min(values) and max(values) <= hi


@dataclass(frozen=True)
class TraceLimits:
    """What a trace may hold and expand to; loaders refuse more, naming the limit and figure.

    >>> TraceLimits(max_requests=10).max_ops == MAX_OPS
    True
    """

    max_bytes: int = MAX_BYTES  # the file, after gunzip
    max_tokens_per_request: int = MAX_TOKENS_PER_REQUEST  # one prompt (real tokens)
    max_total_tokens: int = MAX_TOTAL_TOKENS  # all prompts (trace units) / all ops' token lists
    max_total_output_tokens: int = MAX_TOTAL_OUTPUT_TOKENS  # all output_len summed
    max_requests: int = MAX_REQUESTS  # requests of a request or Mooncake trace
    max_ops: int = MAX_OPS  # ops of an op trace

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TraceLimits.{f.name} must be an int >= 1, got {value!r}")


DEFAULT_LIMITS = TraceLimits()
LIMIT_NAMES = tuple(f.name for f in fields(TraceLimits))


def limit_item(text: str) -> tuple[str, int]:
    """One `NAME=VALUE` (a TraceLimits field, a whole number >= 1; "-" for "_" in the name,
    "," and "_" in the number, and 1e8 are fine); ValueError names what is wrong.

    >>> limit_item("max-total-output-tokens=1e8")
    ('max_total_output_tokens', 100000000)
    """
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in LIMIT_NAMES:
        raise ValueError(f"a limit is NAME=VALUE with NAME one of {', '.join(LIMIT_NAMES)}; "
                         f"got {text!r}")
    try:
        number = float(raw.strip().replace(",", "").replace("_", ""))
    except ValueError:
        number = -1.0
    if not number.is_integer() or number < 1:
        raise ValueError(f"limit {name} must be a whole number >= 1, got {raw!r}")
    return name, int(number)


def parse_limits(spec: str, base: TraceLimits = DEFAULT_LIMITS) -> TraceLimits:
    """`base` with the comma- or space-separated `NAME=VALUE` items of `spec` (a server's
    RADIXLENS_TRACE_LIMITS) put in.

    >>> parse_limits("max_requests=10 max_ops=5").max_ops
    5
    """
    items = [limit_item(part) for part in spec.replace(",", " ").split()]
    return replace(base, **dict(items))


class Tally:
    """Running totals of a trace being loaded: each `add_*` refuses the line that takes a total
    over its limit, naming the limit and the figure. Count a line before building what it
    expands to.

    >>> tally = Tally(TraceLimits(max_total_output_tokens=10))
    >>> tally.add_request(1, prompt_tokens=5, output_tokens=6)
    >>> try:
    ...     tally.add_request(2, prompt_tokens=5, output_tokens=6)
    ... except TraceError as err:
    ...     print(err.line, err.field, err.message)
    2 output_len the trace's output tokens reach 12, over the limit of 10 (max_total_output_tokens)
    """

    def __init__(self, limits: TraceLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.requests = 0  # requests counted so far
        self.ops = 0  # ops counted so far
        self.tokens = 0  # prompt tokens (op traces: the tokens of every op's lists)
        self.output_tokens = 0  # output tokens

    def add_request(self, line: int | None, prompt_tokens: int, output_tokens: int,
                    prompt_field: str = "tokens", output_field: str = "output_len") -> None:
        self.requests += 1
        self._over(self.requests, "max_requests", "requests", line, None)
        self.tokens += prompt_tokens
        self._over(self.tokens, "max_total_tokens", "prompt tokens", line, prompt_field)
        self.output_tokens += output_tokens
        self._over(self.output_tokens, "max_total_output_tokens", "output tokens", line,
                   output_field)

    def add_op(self, line: int, tokens: int, token_field: str = "tokens") -> None:
        self.ops += 1
        self._over(self.ops, "max_ops", "ops", line, None)
        self.tokens += tokens
        self._over(self.tokens, "max_total_tokens", "tokens", line, token_field)

    def _over(self, total: int, limit: str, what: str, line: int | None, key: str | None) -> None:
        cap = getattr(self.limits, limit)
        if total > cap:
            raise TraceError(f"the trace's {what} reach {total:,}, over the limit of {cap:,} "
                             f"({limit})", line, key)

    def check_lines(self, text: str, limit: str, what: str, allow: int = 0) -> None:
        """Refuses at once a text of more non-blank lines than `limit` (plus `allow`: an op
        trace's config line) lets through, naming the first line past it: each line is an item
        or an error, so the file is bad either way and parsing it first would take long."""
        cap = getattr(self.limits, limit) + allow
        if text.count("\n") < cap:
            return
        count = 0
        for i, raw in enumerate(text.split("\n"), start=1):
            count += bool(raw.strip(" \t\r"))
            if count > cap:
                raise TraceError(f"the file has more lines than the limit of "
                                 f"{getattr(self.limits, limit):,} {what} allows ({limit})", i)


# ---------------------------------------------------------------- detecting and dispatching

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


# The other formats' loaders, (file bytes, limits) -> Trace: radix/traces/__init__.py puts
# mooncake.py's, kv_events.py's and ops.py's in (they import this module for its types and field
# checks, so it cannot import them).
LOADERS: dict[str, Callable[[bytes, TraceLimits], Trace]] = {}


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


# ---------------------------------------------------------------- request traces (format a)
# One JSON object a line, one request each:
#   {"rid": str, "arrival": seconds >= 0 (default 0), "output_len": int >= 0,
#    exactly one of "tokens": [int, ...] | "text": str | "messages": [{"role", "content"}, ...],
#    optional "extra_key": str, "cache_salt": str, "priority": int, "meta": any JSON (ignored),
#    "output_tokens": [int, ...] (output_len of them: the reply a simulated run generates)}
# "messages" are OpenAI chat messages (content a string or a list of {"type": "text", "text"}).
# Strings must be valid Unicode (no lone surrogates); totals are bounded by `TraceLimits`.

FIELDS = {"rid", "arrival", "tokens", "text", "messages", "output_len", "extra_key",
          "cache_salt", "priority", "output_tokens", "meta"}  # "meta": anything, ignored
PROMPT_FIELDS = ("tokens", "text", "messages")
MAX_TEXT_CHARS = 16 * 1024 * 1024  # one request's text, before tokenizing


def load_requests(text: str, tokenize: Callable[[str], list[int]] | None = None,
                  chat_template: Callable[[list[dict]], list[int]] | None = None,
                  limits: TraceLimits = DEFAULT_LIMITS) -> Trace:
    """Parse and validate a request trace within `limits`; requests come back sorted by arrival
    (stable).

    >>> t = load_requests('{"rid": "a", "arrival": 1.5, "text": "hi there", "output_len": 2}')
    >>> t.requests[0].arrival, len(t.requests[0].token_ids)
    (1.5, 2)
    """
    requests: list[TraceRequest] = []
    seen: dict[str, int] = {}
    tally = Tally(limits)
    tally.check_lines(text, "max_requests", "requests")
    for line, obj in iter_json_lines(text):
        tr = parse_request(obj, line, tokenize, chat_template, limits.max_tokens_per_request)
        tally.add_request(line, len(tr.token_ids), tr.output_len, _prompt_field(obj))
        if tr.rid in seen:
            raise TraceError(f"duplicate rid {tr.rid!r} (first on line {seen[tr.rid]})",
                             line, "rid")
        seen[tr.rid] = line
        requests.append(tr)
    if not requests:
        raise TraceError("no requests in the file")
    requests.sort(key=lambda r: r.arrival)
    return Trace("request", requests, input_lens=[len(r.token_ids) for r in requests])


def parse_request(obj: Any, line: int, tokenize: Callable[[str], list[int]] | None,
                  chat_template: Callable[[list[dict]], list[int]] | None,
                  max_tokens: int) -> TraceRequest:
    """One line's object -> TraceRequest, or a TraceError naming the line and the field."""
    if not isinstance(obj, dict):
        raise TraceError(f"expected a JSON object, got {type_name(obj)}", line)
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise TraceError(f"unknown field (known: {', '.join(sorted(FIELDS))})", line, unknown[0])
    rid = need(obj, "rid", line)
    if not isinstance(rid, str) or not rid:
        raise TraceError(f"expected a non-empty string, got {type_name(rid)}", line, "rid")
    as_opt_str(rid, line, "rid")
    given = [k for k in PROMPT_FIELDS if k in obj]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise TraceError(f"exactly one of tokens, text, messages is needed; got {what}",
                         line, given[1] if len(given) > 1 else "tokens")
    token_ids = _prompt(obj, given[0], line, tokenize, chat_template, max_tokens)
    output_len = as_int(need(obj, "output_len", line), line, "output_len", 0, MAX_OUTPUT_LEN)
    output_ids = None
    if obj.get("output_tokens") is not None:
        output_ids = as_int_list(obj["output_tokens"], line, "output_tokens", MAX_OUTPUT_LEN)
        if len(output_ids) != output_len:
            raise TraceError(f"{len(output_ids)} tokens but output_len is {output_len}",
                             line, "output_tokens")
    return TraceRequest(
        rid=rid,
        arrival=as_number(obj.get("arrival", 0), line, "arrival", 0.0, MAX_SECONDS),
        token_ids=token_ids,
        output_len=output_len,
        extra_key=as_opt_str(obj.get("extra_key"), line, "extra_key"),
        cache_salt=as_opt_str(obj.get("cache_salt"), line, "cache_salt"),
        priority=as_int(obj.get("priority", 0), line, "priority", -(2 ** 31), 2 ** 31 - 1),
        output_ids=output_ids,
    )


def _prompt_field(obj: dict) -> str:
    return next((k for k in PROMPT_FIELDS if k in obj), "tokens")


def _prompt(obj: dict, key: str, line: int, tokenize: Callable[[str], list[int]] | None,
            chat_template: Callable[[list[dict]], list[int]] | None,
            max_tokens: int) -> list[int]:
    """The prompt as `Tokens`: a list of its own (a JSON list or a tokenizer's output, checked
    and kept as it is, not copied)."""
    value = obj[key]
    if key == "tokens":
        ids = checked_ints(value, line, key, max_tokens)
    elif key == "text":
        if not isinstance(value, str):
            raise TraceError(f"expected a string, got {type_name(value)}", line, key)
        if len(value) > MAX_TEXT_CHARS:
            raise TraceError(f"text longer than {MAX_TEXT_CHARS:,} characters", line, key)
        check_text(value, line, key)
        raw = tokenize(value) if tokenize else textcodec.encode(value, max_tokens + 1)
        ids = checked_ints(_capped(raw, max_tokens, line, key), line, key, max_tokens)
    else:
        messages = _messages(value, line)
        raw = (chat_template(messages) if chat_template
               else textcodec.apply_chat_template(messages, max_tokens + 1))
        ids = checked_ints(_capped(raw, max_tokens, line, key), line, key, max_tokens)
    if not ids:
        raise TraceError("the prompt is empty (0 tokens)", line, key)
    return ids


def _capped(ids: Any, max_tokens: int, line: int, key: str) -> list:
    """The tokenizer's ids as a list, refused past `max_tokens` (the fallback codec stops one
    past it, so the count is only known to be larger)."""
    ids = list(ids)
    if len(ids) > max_tokens:
        raise TraceError(f"more than {max_tokens:,} tokens, over the cap (max_tokens_per_request)",
                         line, key)
    return ids


def _messages(value: Any, line: int) -> list[dict]:
    """OpenAI chat messages, normalised to [{"role": str, "content": str}, ...]."""
    if not isinstance(value, list) or not value:
        raise TraceError(f"expected a non-empty list of messages, got {type_name(value)}",
                         line, "messages")
    out, total = [], 0
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise TraceError(f"expected an object, got {type_name(m)}", line, where)
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise TraceError(f"expected a role string, got {type_name(role)}",
                             line, where + ".role")
        as_opt_str(role, line, where + ".role")
        if isinstance(content, list):
            content = _text_parts(content, line, where + ".content")
        if not isinstance(content, str):
            raise TraceError(f"expected a string or a list of text parts, got {type_name(content)}",
                             line, where + ".content")
        total += len(content)
        if total > MAX_TEXT_CHARS:
            raise TraceError(f"messages longer than {MAX_TEXT_CHARS:,} characters", line, where)
        check_text(content, line, where + ".content")
        out.append({"role": role, "content": content})
    return out


def _text_parts(parts: list, line: int, where: str) -> str:
    texts = []
    for j, part in enumerate(parts):
        if not (isinstance(part, dict) and part.get("type") == "text"
                and isinstance(part.get("text"), str)):
            raise TraceError('only {"type": "text", "text": str} parts are supported',
                             line, f"{where}[{j}]")
        texts.append(part["text"])
    return "".join(texts)


# ---------------------------------------------------------------- writing

def request_to_json(tr: TraceRequest) -> dict:
    """The line object of one request (optional fields only when set).

    >>> request_to_json(TraceRequest("a", 0.0, (5, 6), 1))
    {'rid': 'a', 'arrival': 0.0, 'tokens': [5, 6], 'output_len': 1}
    """
    obj: dict[str, Any] = {"rid": tr.rid, "arrival": tr.arrival, "tokens": list(tr.token_ids),
                           "output_len": tr.output_len}
    for key in ("extra_key", "cache_salt"):
        if getattr(tr, key) is not None:
            obj[key] = getattr(tr, key)
    if tr.priority:
        obj["priority"] = tr.priority
    if tr.output_ids is not None:
        obj["output_tokens"] = list(tr.output_ids)
    return obj


def dumps_requests(requests: Iterable[TraceRequest]) -> str:
    """A request trace as text, one compact JSON object a line."""
    return "".join(json.dumps(request_to_json(r), separators=(",", ":")) + "\n"
                   for r in requests)
