"""Recordings of watched streams: the EventBatch stream, with seq numbers and receive times kept.

A record is the publisher's own msgpack EventBatch `[ts, events, data_parallel_rank]` with three
more array elements: `[ts, events, data_parallel_rank, seq, received, source]` (seq an int,
received a float of wall-clock seconds, source the publisher's endpoint as watched). The first
three elements are the received payload's bytes unchanged, records lie back to back in the order
they were applied, and vLLM's own msgspec decoder reads a record as a plain EventBatch (an
array_like struct ignores trailing elements). `read_recording` also reads plain recordings
(2- or 3-element batches), and `replay_recording` runs records through `Stream` again, so a gap
in a recording reads as lost there too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, BinaryIO, NamedTuple

import msgpack

from radix.blocks.kv_events import EventBatch, batch_from_wire
from radix.traces.kv_events import unpack_stream
from radix.watch.stream import Stream
from radix.watch.wire import Message


class Record(NamedTuple):
    source: str | None  # the publisher (None in a plain recording)
    seq: int | None  # its sequence number (None in a plain recording)
    received: float | None  # wall-clock seconds when the subscriber got it
    batch: EventBatch
    payload: bytes  # the batch's msgpack bytes, as published (rank filled in when absent)


def _array_header(payload: bytes) -> tuple[int, int]:
    """(element count, header length) of a msgpack array at the start of `payload`."""
    if payload and 0x90 <= payload[0] <= 0x9F:
        return payload[0] & 0x0F, 1
    if payload[:1] == b"\xdc" and len(payload) >= 3:
        return int.from_bytes(payload[1:3], "big"), 3
    if payload[:1] == b"\xdd" and len(payload) >= 5:
        return int.from_bytes(payload[1:5], "big"), 5
    raise ValueError("the payload is not a msgpack array")


def record_bytes(payload: bytes, seq: int, received: float, source: str) -> bytes:
    """One record: the payload's elements kept byte for byte, then seq, received and source.

    >>> r = record_bytes(bytes.fromhex("92cb3ff000000000000090"), 7, 2.5, "tcp://h:1")
    >>> msgpack.unpackb(r)
    [1.0, [], None, 7, 2.5, 'tcp://h:1']
    """
    count, header = _array_header(payload)
    if count not in (2, 3):
        raise ValueError(f"an EventBatch has 2 or 3 elements, this payload {count}")
    body = payload[header:] + (b"\xc0" if count == 2 else b"")  # a missing rank becomes nil
    return b"\x96" + body + msgpack.packb(seq) + msgpack.packb(float(received)) + \
        msgpack.packb(source)


class Recorder:
    """Appends records to a binary file as the watcher applies batches (a `Stream` sink)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.num_records = 0

    def __call__(self, source: str, msg: Message, received: float) -> None:
        self.out.write(record_bytes(msg.payload, msg.seq, received, source))
        self.out.flush()
        self.num_records += 1


def read_recording(data: bytes) -> list[Record]:
    """Records (or plain batches) back to back -> Records; ValueError names the record.

    >>> recs = read_recording(record_bytes(bytes.fromhex("92cb3ff000000000000090"), 7, 2.5, "w"))
    >>> [(r.source, r.seq, r.received, r.batch.ts) for r in recs]
    [('w', 7, 2.5, 1.0)]
    """
    return [_record(raw, data[start:end], where)
            for raw, where, start, end in unpack_stream(data, "record", "recording")]


def _record(raw: Any, chunk: bytes, where: str) -> Record:
    if not isinstance(raw, list) or len(raw) not in (2, 3, 6):
        raise ValueError(f"{where}: expected [ts, events, rank] or [ts, events, rank, seq, "
                         "received, source]")
    batch = batch_from_wire(list(raw[:3]), where)
    if len(raw) != 6:
        return Record(None, None, None, batch, chunk)
    seq, received, source = raw[3:]
    if not isinstance(seq, int) or seq < 0:
        raise ValueError(f"{where}: field 'seq': expected an int >= 0, got {seq!r}")
    if not isinstance(received, int | float):
        raise ValueError(f"{where}: field 'received': expected seconds, got {received!r}")
    if not isinstance(source, str):
        raise ValueError(f"{where}: field 'source': expected a string, got {source!r}")
    payload = msgpack.packb(list(raw[:3]))
    return Record(source, seq, float(received), batch, payload)


def replay_recording(records: Iterable[Record]) -> dict[str, Stream]:
    """The views a watcher had: each source's records through a `Stream`, in order (no replay
    socket, so a gap in the recording marks the view incomplete)."""
    streams: dict[str, Stream] = {}
    for i, rec in enumerate(records):
        name = rec.source or "recording"
        stream = streams.setdefault(name, Stream(name))
        seq = rec.seq if rec.seq is not None else stream.counts["applied"]
        need = stream.on_live(Message(b"", seq, rec.payload), rec.received or float(i))
        if need is not None:
            stream.on_replay(None, 0.0)  # no replay socket here: what is missing is lost
    return streams
