"""Op traces: a JSONL script of calls on a RadixCache, for `python -m radix replay`.

Line 1: {"op": "config", "page_size": 1, "policy": "lru", "policy_config": {}, "capacity": N}
(every field optional; capacity = KV slots for request ops, default unbounded). Then one op a line:
  insert {tokens, value?, priority?, chunked?, extra_key?, cache_salt?}   match {tokens, ...}
  lock {node} | lock {tokens}   unlock {node}   evict {num_tokens}
  start {rid, tokens, extra_key?, cache_salt?, priority?}   extend {rid, num_tokens?}
  decode {rid, token}   unfinished {rid, chunked?}   finished {rid, is_insert?}
`start` matches tokens[:-1], as SGLang (the last token is always computed). Validation names the
line and field; nothing is evaluated. Execution: radix/runs/ops.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radix.traces.base import TraceError, iter_json_lines, type_name
from radix.tree.eviction import POLICIES

MAX_TRACE_BYTES = 64 * 1024 * 1024
MAX_TOKENS = 1_000_000  # per op
MAX_INT = 2**62

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
        for i, tok in enumerate(value):
            if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok <= MAX_INT:
                raise OpTraceError(f"item {i} is {tok!r}, expected an int >= 0", line, name)
    elif kind == _STR and not isinstance(value, str):
        raise bad("a string")
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


def parse_ops(text: str | bytes) -> OpTrace:
    """Validates an op trace.

    >>> t = parse_ops('{"op": "config", "page_size": 2}\\n{"op": "insert", "tokens": [1, 2]}')
    >>> t.page_size, t.ops[0].op, t.ops[0].line
    (2, 'insert', 2)
    """
    if isinstance(text, bytes):
        if len(text) > MAX_TRACE_BYTES:
            raise OpTraceError(f"trace is {len(text):,} bytes, the limit is {MAX_TRACE_BYTES:,}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OpTraceError(f"not UTF-8 text (bad byte at offset {exc.start})") from None
    config: dict[str, Any] = {}
    ops: list[Op] = []
    for n, row in _json_lines(text):
        if not isinstance(row, dict):
            raise OpTraceError(f"expected a JSON object, got {type_name(row)}", n)
        op = row.get("op")
        if op == "config":
            if ops or config:
                raise OpTraceError("config must be the first line", n, "op")
            config = _fields(n, row, CONFIG_FIELDS) or {"_seen": True}
            continue
        if not isinstance(op, str) or op not in OP_FIELDS:
            raise OpTraceError(f"unknown op {op!r}"[:120], n, "op")
        args = _fields(n, row, OP_FIELDS[op])
        if op == "lock" and ("node" in args) == ("tokens" in args):
            raise OpTraceError('give exactly one of "node" or "tokens"', n, "node")
        ops.append(Op(n, op, args))
    if not ops and not config:
        raise OpTraceError("trace is empty")
    return _build(config, ops)


def _json_lines(text: str):
    """iter_json_lines, with its TraceErrors as OpTraceErrors."""
    try:
        yield from iter_json_lines(text)
    except TraceError as exc:
        raise OpTraceError(exc.message, exc.line, exc.field) from None


def _build(config: dict[str, Any], ops: list[Op]) -> OpTrace:
    page_size = config.get("page_size", 1)
    if page_size < 1:
        raise OpTraceError("must be >= 1", 1, "page_size")
    policy = config.get("policy", "lru").lower()
    if policy not in POLICIES:
        raise OpTraceError(f"unknown policy {policy!r}", 1, "policy")
    capacity = config.get("capacity")
    if capacity is not None and capacity < 0:
        raise OpTraceError("must be >= 0", 1, "capacity")
    return OpTrace(page_size, policy, config.get("policy_config") or {}, capacity, tuple(ops))


def load_ops(source: str | Path | bytes) -> OpTrace:
    """Reads and validates an op trace from a path (or the bytes of one)."""
    if isinstance(source, bytes):
        return parse_ops(source)
    path = Path(source)
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise OpTraceError(f"{path}: {size:,} bytes, the limit is {MAX_TRACE_BYTES:,}")
    return parse_ops(path.read_bytes())
