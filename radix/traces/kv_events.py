"""KV-event recordings (format c): vLLM's EventBatch stream, loaded into a Trace of batches.

Two renderings of one recording: msgpack (the batches' payloads back to back, as vLLM's
publisher sends them, without ZMQ framing) and JSON lines (one batch a line, either
{"ts", "events": [...], "data_parallel_rank"} or the wire array [ts, [events], dp_rank]).
Events are decoded by `radix.blocks.kv_events` (vLLM's and SGLang's variants); any bad value is
one TraceError naming the line or batch and the field. The events are replayed into a block view
in one place, radix/watch/view.py's `WorkerCache` (the Watch page, `radix watch` and the Trace
debugger's recordings); `StoredBlock` and `as_int_hash` describe a recorded block for both.
Leaves out: ZMQ topics and sequence numbers, hybrid-model cache groups (group_idx is ignored).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from radix.blocks.kv_events import batch_from_wire
from radix.traces.fields import TraceError, type_name
from radix.traces.limits import TraceLimits
from radix.traces.reading import decode_text, iter_json_lines
from radix.traces.trace import Trace

_FIELD = re.compile(r"field '([^']+)'")


def _error(exc: ValueError, line: int | None) -> TraceError:
    """A TraceError from the decoder's message, keeping its field name for `.field`."""
    err = TraceError(str(exc))
    err.line = line
    match = _FIELD.search(str(exc))
    err.field = match.group(1) if match else None
    return err


def read_kv_events(data: bytes, limits: TraceLimits) -> Trace:
    """load_trace's recording loader: a recording is bounded by `limits.max_bytes` alone (which
    read_bytes checked before)."""
    return load_kv_events(data)


def load_kv_events(data: bytes) -> Trace:
    """A recording (msgpack or JSON lines) -> Trace("kv_events", batches=[EventBatch, ...]).

    >>> t = load_kv_events(b'{"ts": 1.0, "events": [{"type": "AllBlocksCleared"}]}')
    >>> t.format, len(t.batches), type(t.batches[0].events[0]).__name__
    ('kv_events', 1, 'AllBlocksCleared')
    """
    if data[:1] in (b"{", b"[") or data.lstrip()[:1] in (b"{", b"["):
        batches = _from_json_lines(decode_text(data))
    else:
        batches = _from_msgpack(data)
    if not batches:
        raise TraceError("no event batches in the file")
    return Trace("kv_events", batches=batches)


def _from_json_lines(text: str) -> list:
    batches = []
    for line, raw in iter_json_lines(text):
        if isinstance(raw, dict):
            for key in ("ts", "events"):
                if key not in raw:
                    raise TraceError("missing", line, key)
            raw = [raw["ts"], raw["events"], raw.get("data_parallel_rank")]
        try:
            batches.append(batch_from_wire(raw, f"line {line}"))
        except ValueError as exc:
            raise _error(exc, line) from None
    return batches


def _from_msgpack(data: bytes) -> list:
    """Batches back to back; a truncated or junk stream names the batch and byte offset."""
    batches = []
    for raw, where, _, _ in unpack_stream(data, "batch", "EventBatch stream", TraceError):
        if not isinstance(raw, list):
            raise TraceError(f"{where}: expected an EventBatch array, got {type_name(raw)}")
        try:
            batches.append(batch_from_wire(raw, where))
        except ValueError as exc:
            raise _error(exc, None) from None
    return batches


def unpack_stream(data: bytes, noun: str, kind: str, error: type[ValueError] = ValueError
                  ) -> Iterator[tuple[Any, str, int, int]]:
    """Each msgpack object in `data`, back to back, as (object, where, start byte, end byte);
    `where` is "<noun> <number> (byte <offset>)". Bad bytes raise `error`, naming that place.

    >>> [(obj, where) for obj, where, _, _ in unpack_stream(bytes([0x91, 1, 2]), "batch", "")]
    [([1], 'batch 1 (byte 0)'), (2, 'batch 2 (byte 2)')]
    >>> next(unpack_stream(bytes([0x92, 1]), "record", "recording"))
    Traceback (most recent call last):
    ValueError: record 1 (byte 0): truncated msgpack (the file ends inside a record)
    """
    unpacker = msgpack.Unpacker(strict_map_key=False, max_buffer_size=len(data) + 1)
    unpacker.feed(data)
    count = offset = 0
    while offset < len(data):
        count += 1
        where = f"{noun} {count} (byte {offset})"
        try:
            raw = unpacker.unpack()
        except msgpack.OutOfData:
            raise error(f"{where}: truncated msgpack (the file ends inside a {noun})") from None
        except msgpack.StackError:
            raise error(f"{where}: msgpack nested deeper than the decoder allows") from None
        except (msgpack.UnpackException, ValueError, RecursionError) as exc:
            raise error(f"{where}: binary data that is not a msgpack {kind} "
                        f"({type(exc).__name__}: {str(exc)[:80]})") from None
        except TypeError:  # a map whose key is a list (unhashable)
            raise error(f"{where}: a msgpack map has a key that is a list") from None
        end = unpacker.tell()
        yield raw, where, offset, end
        offset = end


@dataclass(frozen=True, slots=True)
class StoredBlock:
    """One block a BlockStored event stored, as the recording describes it."""

    block_hash: int
    parent_block_hash: int | None  # None: the first block of its chain
    token_ids: tuple[int, ...]  # this block's block_size tokens
    medium: str | None  # "GPU", "CPU", ... as published
    batch_index: int  # the batch that stored it


def as_int_hash(block_hash: int | bytes | None) -> int | None:
    """A recorded hash as an int: bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) become
    their low 64 bits, as vLLM's default publishes them; ints stay as they are.

    >>> as_int_hash(bytes(30) + b"\\x01\\x02"), as_int_hash(-5)
    (258, -5)
    """
    if isinstance(block_hash, bytes):
        return int.from_bytes(block_hash[-8:], "big")
    return block_hash

