"""What the Trace debugger's download files hold, written line by line to a stream, and their
size said before they are written.

`write_events` writes an event log's steps as JSON lines (the same line per event as
`EventLog.to_jsonl`), optionally gzipped, one step at a time: nothing the size of the log is
built. `estimate_events` says the size of a step range (and gzipped) from a sample of steps;
`write_tree` writes a tree's JSON a node at a time; `estimate_tree` says its size from a
sample of nodes. Leaves out: where the files go
and how they are served (runtime/downloads.py, pages/_downloads.py).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import threading
import zlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, BinaryIO, NamedTuple

from radix import events as ev

SAMPLES = 48  # steps (or nodes) an estimate serializes; fewer in all: exact
GZIP_LEVEL = 6


def event_line(e: Any) -> str:
    """One event as `EventLog.to_jsonl` writes it: {"type": class name, ...fields}, a sequence
    field as a list.

    >>> from radix import events as ev
    >>> event_line(ev.LockChanged(7, 1, 1, 12))
    '{"type": "LockChanged", "node_id": 7, "lock_ref": 1, "delta": 1, "size_moved": 12}'
    """
    row = {"type": type(e).__name__}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        row[f.name] = v if isinstance(v, str | int | float | type(None)) else list(v)
    return _ENCODE(row)


# json.dumps(row, default=str) as to_jsonl writes it, with one encoder: json.dumps makes a new
# one for every call given `default`, each a reference cycle left for the collector
_ENCODE = json.JSONEncoder(default=str).encode


def _step_bytes(steps: Sequence[Sequence[Any]], i: int) -> bytes:
    return "".join(event_line(e) + "\n" for e in steps[i]).encode()


class Estimate(NamedTuple):
    size: int  # bytes, as written
    gz_size: int  # bytes, gzipped
    exact: bool  # every step (node) was serialized: `size` is the size


def _weight(step: Sequence[Any]) -> int:
    """What a step's JSON lines grow with: its events, and the ids its inserts and evictions
    list (a 2,000-token insert writes ~2,000 x 2 numbers)."""
    w = len(step)
    for e in step:
        kind = type(e)
        if kind is ev.NodeInserted:
            w += len(e.token_ids) + len(e.slot_ids)
        elif kind is ev.NodeEvicted:
            w += len(e.slot_ids)
    return w


def estimate_events(steps: Sequence[Sequence[Any]], lo: int = 0, hi: int | None = None,
                    samples: int = SAMPLES) -> Estimate:
    """The size of steps lo..hi-1 as JSON lines: serialized whole when there are at most
    `samples` steps, else `samples` steps spread evenly over the range, their bytes scaled by
    weight (`_weight`: events and listed ids). Gzipped: the sample's ratio at GZIP_LEVEL."""
    hi = len(steps) if hi is None else hi
    if hi <= lo:
        return Estimate(0, 20, True)
    picks = range(lo, hi) if hi - lo <= samples else sorted(
        {lo + (hi - lo - 1) * k // (samples - 1) for k in range(samples)})
    raw = b"".join(_step_bytes(steps, i) for i in picks)
    gz = len(zlib.compress(raw, GZIP_LEVEL)) + 18  # gzip's header and trailer
    if hi - lo <= samples:
        return Estimate(len(raw), gz, True)
    picked = sum(_weight(steps[i]) for i in picks) or 1
    scale = sum(_weight(s) for s in steps[lo:hi]) / picked
    return Estimate(round(len(raw) * scale), round(gz * scale), False)


def steps_within(steps: Sequence[Sequence[Any]], at: int, budget: int) -> tuple[int, int]:
    """A step range (lo, hi: steps lo..hi-1) around step `at` whose estimated size is about
    `budget` bytes: as many steps on each side as the log's mean step size allows."""
    n = len(steps)
    whole = estimate_events(steps)
    if whole.size <= budget:
        return 0, n
    per = max(1, whole.size // max(1, n))
    half = max(1, budget // per // 2)
    lo = max(0, min(at - half, n - 2 * half))
    return lo, min(n, lo + 2 * half)


def write_events(out: BinaryIO, steps: Sequence[Sequence[Any]], lo: int = 0,
                 hi: int | None = None, *, compress: bool = False,
                 progress: Callable[[float, str], None] | None = None,
                 cancel: threading.Event | None = None, chunk: int = 1 << 20) -> None:
    """Steps lo..hi-1 as JSON lines into `out` (gzipped with `compress`), a step at a time,
    `chunk` bytes at most held before they go; `progress(fraction, words)` every 1,000 steps;
    stops when `cancel` is set."""
    hi = len(steps) if hi is None else hi
    sink = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL) if compress else out
    try:
        buf = io.BytesIO()
        for i in range(lo, hi):
            buf.write(_step_bytes(steps, i))
            if buf.tell() > chunk:
                sink.write(buf.getvalue())
                buf = io.BytesIO()
            if (i - lo) % 1000 == 999:
                if cancel is not None and cancel.is_set():
                    raise InterruptedError("cancelled")
                if progress is not None:
                    progress((i - lo + 1) / (hi - lo), f"step {i + 1:,} of {hi:,}")
        sink.write(buf.getvalue())
    finally:
        if compress:
            sink.close()  # writes gzip's trailer; `out` stays open


def tree_json(snapshot: Any, ids: bool = True) -> dict[str, Any]:
    """A TreeSnapshot as plain JSON-able data; without `ids` each node's token and slot ids
    become their counts (the structure of a tree too big to download whole)."""
    nodes = []
    for n in snapshot.nodes:
        row = n._asdict()
        if ids:
            row["token_ids"], row["slot_ids"] = list(n.token_ids), list(n.slot_ids)
        else:
            del row["token_ids"], row["slot_ids"]
            row["num_tokens"] = len(n.token_ids)
        nodes.append(row)
    return {"step": snapshot.step, "page_size": snapshot.page_size,
            "evictable_size": snapshot.evictable_size, "protected_size": snapshot.protected_size,
            "nodes": nodes}


def write_tree(out: BinaryIO, snapshot: Any, ids: bool = True, compress: bool = False,
               chunk: int = 1 << 20) -> None:
    """`tree_json(snapshot, ids)` as JSON into `out`, byte for byte as json.dumps writes it,
    made one node at a time: a node's ids become text as they are read, so the tree's millions
    of ids never stand in memory as Python ints at once (they did, as lists, in tree_json)."""
    sink = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL) if compress else out
    mark = json.dumps("\x00ids\x00")  # a string no field holds, written as "\u0000ids\u0000"
    head = json.dumps({"step": snapshot.step, "page_size": snapshot.page_size,
                       "evictable_size": snapshot.evictable_size,
                       "protected_size": snapshot.protected_size, "nodes": []})
    try:
        buf, held = [head[:-2]], 0  # up to the nodes' "["
        for k, n in enumerate(snapshot.nodes):
            row = n._asdict()
            if ids:
                row["token_ids"] = row["slot_ids"] = "\x00ids\x00"
                text = json.dumps(row).replace(mark, _ints(n.token_ids), 1)
                text = text.replace(mark, _ints(n.slot_ids), 1)
            else:
                text = json.dumps(tree_json(SimpleNamespace(nodes=[n], step=0, page_size=0,
                                                            evictable_size=0,
                                                            protected_size=0), False)
                                  ["nodes"][0])
            buf.append(", " + text if k else text)
            held += len(text)
            if held > chunk:
                sink.write("".join(buf).encode())
                buf, held = [], 0
        buf.append("]}")
        sink.write("".join(buf).encode())
    finally:
        if compress:
            sink.close()


def _ints(ids: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, ids)) + "]"


def estimate_tree(snapshot: Any, ids: bool = True, samples: int = 16) -> Estimate:
    """The size of `tree_json(snapshot, ids)` as JSON, from `samples` nodes spread over the
    tree: each one's fields as written, and its ids as their count times the mean width of 60
    of them written (", 123": 20 from its start, middle and end; ids grow along a path); the
    fields scaled by nodes, the id bytes by ids.
    Gzipped: the sample's ratio. Exact (every node written) up to `samples` nodes."""
    nodes = snapshot.nodes
    if len(nodes) <= samples:
        raw = json.dumps(tree_json(snapshot, ids)).encode()
        return Estimate(len(raw), len(zlib.compress(raw, GZIP_LEVEL)) + 18, True)
    picks = [nodes[(len(nodes) - 1) * k // (samples - 1)] for k in range(samples)]
    head = SimpleNamespace(nodes=picks, step=snapshot.step, page_size=snapshot.page_size,
                           evictable_size=snapshot.evictable_size,
                           protected_size=snapshot.protected_size)
    rows = json.dumps(tree_json(head, ids=False)).encode()
    fields = len(rows) * len(nodes) / samples
    if not ids:
        return Estimate(round(fields), round(len(zlib.compress(rows, GZIP_LEVEL)) * len(nodes)
                                              / samples), False)
    few, ids_bytes, ids_count = [], 0.0, 0
    for n in picks:  # each node's id width, weighted by its ids: long prompts count for more
        for seq in (n.token_ids, n.slot_ids):
            shown = _spread(seq)
            text = json.dumps(shown).encode()
            few.append(text)
            ids_bytes += len(text) / max(1, len(shown)) * len(seq)
            ids_count += len(seq)
    total_ids = sum(len(n.token_ids) + len(n.slot_ids) for n in nodes)
    size = fields + ids_bytes / max(1, ids_count) * total_ids
    ratio = len(zlib.compress(rows + b"".join(few), GZIP_LEVEL)) / (len(rows) + sum(map(len, few)))
    return Estimate(round(size), round(size * ratio), False)


def _spread(ids: Sequence[int], k: int = 20) -> list[int]:
    """Up to 3k ids: k from the start, the middle and the end of `ids`."""
    n = len(ids)
    if n <= 3 * k:
        return list(ids)
    mid = (n - k) // 2
    return [*ids[:k], *ids[mid:mid + k], *ids[n - k:]]
