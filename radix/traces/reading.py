"""Reading a trace file: its bytes (gunzipped, every member, under the size cap), UTF-8 text,
and JSON Lines, each error a TraceError naming the line.

JSON is read per RFC 8259 as JSON Lines: a line ends at "\\n" only, CRLF is whitespace, nesting
deeper than MAX_DEPTH is refused without recursing. Nothing is evaluated or unpickled.
Leaves out: other compressions, network sources; msgpack (kv_events.py reads its own).
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Iterator
from typing import Any

from radix.traces.fields import TraceError

MAX_DEPTH = 32  # JSON nesting cap: deeper is junk, and would recurse deeply


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
