"""A trace's fields, checked: TraceError (one printable line naming the line and the field)
and the checks every loader runs on what it reads (ints, numbers, strings, token lists).

Every loader (requests.py, mooncake.py, kv_events.py, ops.py) turns a malformed value into one
TraceError through these, so a bad file reads the same whatever its format: `line 7, field
"tokens": expected a list of ints, got str`. Bools are never ints, NaN and lone surrogates are
refused. Leaves out: what a whole trace may add up to (limits.py).
"""

from __future__ import annotations

import math
from typing import Any

MAX_TOKEN_ID = (1 << 31) - 1  # token ids are 0..MAX_TOKEN_ID
MAX_OUTPUT_LEN = 1 << 20  # one request's output_len / output_length
MAX_SECONDS = 1e9  # arrival cap (about 31 years)
MAX_ERROR_CHARS = 400  # a TraceError's text, at most


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
    radix.traces.fields.TraceError: line 3, field "rid": a lone surrogate U+D800 at character 1 ...
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
