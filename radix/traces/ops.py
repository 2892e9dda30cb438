"""Op traces: a JSONL script of calls on a RadixCache, for `python -m radix replay`.

Line 1: {"op": "config", "page_size": 1, "policy": "lru", "policy_config": {}, "capacity": N}
(every field optional; capacity = KV slots for request ops, N >= 1, default unbounded). Then
one op a line:
  insert {tokens, value?, priority?, chunked?, extra_key?, cache_salt?}   match {tokens, ...}
  lock {node} | lock {tokens}   unlock {node}   evict {num_tokens}
  start {rid, tokens, extra_key?, cache_salt?, priority?}   extend {rid, num_tokens?}
  decode {rid, token}   unfinished {rid, chunked?}   finished {rid, is_insert?}
`start` matches tokens[:-1], as SGLang (the last token is always computed). Validation names the
line and field; nothing is evaluated; at most `TraceLimits.max_ops` ops and `max_total_tokens`
tokens in all lists. Execution: radix/runs/ops.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radix.traces.fields import TraceError, check_text, ints_in_range, type_name
from radix.traces.limits import DEFAULT_LIMITS, Tally, TraceLimits
from radix.traces.reading import decode_text, iter_json_lines, read_bytes
from radix.traces.trace import Trace
from radix.tree.evict_policy import POLICIES, get_strategy

MAX_TOKENS = 1_000_000  # per op
MAX_INT = 2**62
MAX_STR = 256  # rid, extra_key, cache_salt, policy: characters

_INT, _INTS, _STR, _BOOL, _OBJ = "int", "list of ints", "string", "bool", "object"
# op -> {field: (kind, required)}
OP_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "insert": {"tokens": (_INTS, True), "value": (_INTS, False), "priority": (_INT, False),
               "chunked": (_BOOL, False), "extra_key": (_STR, False), "cache_salt": (_STR, False)},
    "match": {"tokens": (_INTS, True), "extra_key": (_STR, False), "cache_salt": (_STR, False)},
    "lock": {"node": (_INT, False), "tokens": (_INTS, False), "extra_key": (_STR, False),
             "cache_salt": (_STR, False)},
    "unlock": {"node": (_INT, True)},
    "evict": {"num_tokens": (_INT, True)},
    "start": {"rid": (_STR, True), "tokens": (_INTS, True), "extra_key": (_STR, False),
              "cache_salt": (_STR, False), "priority": (_INT, False)},
    "extend": {"rid": (_STR, True), "num_tokens": (_INT, False)},
    "decode": {"rid": (_STR, True), "token": (_INT, True)},
    "unfinished": {"rid": (_STR, True), "chunked": (_BOOL, False)},
    "finished": {"rid": (_STR, True), "is_insert": (_BOOL, False)},
}
CONFIG_FIELDS = {"page_size": (_INT, False), "policy": (_STR, False),
                 "policy_config": (_OBJ, False), "capacity": (_INT, False)}


class OpTraceError(TraceError):
    """A bad op trace; the message names the line and the field (a TraceError)."""


@dataclass(frozen=True)
class Op:
    line: int  # 1-based line number in the file
    op: str
    args: dict[str, Any]


@dataclass(frozen=True)
class OpTrace:
    page_size: int = 1
    policy: str = "lru"
    policy_config: dict[str, Any] = field(default_factory=dict)
    capacity: int | None = None
    ops: tuple[Op, ...] = ()


def _check(line: int, name: str, value: Any, kind: str) -> None:
    def bad(expected: str) -> OpTraceError:
        return OpTraceError(f"expected {expected}, got {type_name(value)}", line, name)

    if kind == _INT:
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an int")
        if not -MAX_INT <= value <= MAX_INT:
            raise OpTraceError(f"{value} is out of range", line, name)
    elif kind == _INTS:
        if not isinstance(value, list):
            raise bad("a list of ints")
        if len(value) > MAX_TOKENS:
            raise OpTraceError(f"{len(value):,} tokens, the limit is {MAX_TOKENS:,}", line, name)
        for i, tok in enumerate([] if ints_in_range(value, 0, MAX_INT) else value):
            if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok <= MAX_INT:
                what = tok if isinstance(tok, int) and not isinstance(tok, bool) else type_name(tok)
                raise OpTraceError(f"item {i} is {what}, expected an int in [0, {MAX_INT:,}]",
                                   line, name)
    elif kind == _STR:
        if not isinstance(value, str):
            raise bad("a string")
        if len(value) > MAX_STR:
            raise OpTraceError(f"a string of {len(value):,} characters; the limit is {MAX_STR}",
                               line, name)
        check_text(value, line, name)
    elif kind == _BOOL and not isinstance(value, bool):
        raise bad("true or false")
    elif kind == _OBJ and not isinstance(value, dict):
        raise bad("an object")


def _fields(line: int, row: dict, spec: dict[str, tuple[str, bool]]) -> dict[str, Any]:
    unknown = sorted(set(row) - set(spec) - {"op"})
    if unknown:
        raise OpTraceError("unknown field", line, unknown[0])
    for name, (kind, required) in spec.items():
        if name in row:
            _check(line, name, row[name], kind)
        elif required:
            raise OpTraceError("missing", line, name)
    return {k: v for k, v in row.items() if k != "op"}


def read_ops(data: bytes, limits: TraceLimits = DEFAULT_LIMITS) -> Trace:
    """load_trace's op-trace loader: the file's text as Trace("ops", ops=OpTrace)."""
    return Trace("ops", ops=parse_ops(decode_text(data), limits))


def parse_ops(text: str | bytes, limits: TraceLimits = DEFAULT_LIMITS) -> OpTrace:
    """Validates an op trace (bytes: gunzipped and decoded as a file would be).

    >>> t = parse_ops('{"op": "config", "page_size": 2}\\n{"op": "insert", "tokens": [1, 2]}')
    >>> t.page_size, t.ops[0].op, t.ops[0].line
    (2, 'insert', 2)
    """
    try:
        if isinstance(text, bytes):
            text = decode_text(read_bytes(text, limits.max_bytes)[0])
        return _parse(text, limits)
    except OpTraceError:
        raise
    except TraceError as exc:
        raise OpTraceError(exc.message, exc.line, exc.field) from None


def _parse(text: str, limits: TraceLimits) -> OpTrace:
    config: dict[str, Any] = {}
    ops: list[Op] = []
    tally = Tally(limits)
    tally.check_lines(text, "max_ops", "ops", allow=1)
    for n, row in iter_json_lines(text):
        if not isinstance(row, dict):
            raise OpTraceError(f"expected a JSON object, got {type_name(row)}", n)
        op = row.get("op")
        if op == "config":
            if ops or config:
                raise OpTraceError("config must be the first line", n, "op")
            config = _fields(n, row, CONFIG_FIELDS) or {"_seen": True}
            continue
        if not isinstance(op, str):
            raise OpTraceError(f"expected an op name (a string), got {type_name(op)}", n, "op")
        if op not in OP_FIELDS:
            raise OpTraceError(f"unknown op {op[:40]!r} (known: {', '.join(OP_FIELDS)})", n, "op")
        tally.add_op(n, sum(len(row[k]) for k in ("tokens", "value")
                            if isinstance(row.get(k), list)))
        args = _fields(n, row, OP_FIELDS[op])
        if op == "lock" and ("node" in args) == ("tokens" in args):
            raise OpTraceError('give exactly one of "node" or "tokens"', n, "node")
        ops.append(Op(n, op, args))
    if not ops and not config:
        raise OpTraceError("trace is empty")
    return _build(config, ops)


def _build(config: dict[str, Any], ops: list[Op]) -> OpTrace:
    page_size = config.get("page_size", 1)
    if not 1 <= page_size <= MAX_TOKENS:
        raise OpTraceError(f"{page_size} is out of range [1, {MAX_TOKENS:,}]", 1, "page_size")
    policy = config.get("policy", "lru").lower()
    if policy not in POLICIES:
        raise OpTraceError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})", 1,
                           "policy")
    policy_config = config.get("policy_config") or {}
    threshold = policy_config.get("protected_threshold", 0)
    if isinstance(threshold, bool) or not isinstance(threshold, int) or abs(threshold) > MAX_INT:
        raise OpTraceError("protected_threshold: expected an int", 1, "policy_config")
    try:
        get_strategy(policy, policy_config)
    except ValueError as exc:
        raise OpTraceError(str(exc), 1, "policy_config") from None
    capacity = config.get("capacity")
    if capacity is not None and capacity < 1:
        raise OpTraceError(f"{capacity} slots: a pool needs at least 1 (leave capacity out for "
                           "an unbounded pool)", 1, "capacity")
    return OpTrace(page_size, policy, policy_config, capacity, tuple(ops))


def load_ops(source: str | Path | bytes, limits: TraceLimits = DEFAULT_LIMITS) -> OpTrace:
    """Reads and validates an op trace from a path (gzipped or not) or the bytes of one."""
    if isinstance(source, bytes):
        return parse_ops(source, limits)
    with open(source, "rb") as f:
        return parse_ops(f.read(limits.max_bytes + 1), limits)  # read_bytes caps and gunzips
