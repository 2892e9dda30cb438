"""vLLM's KV cache events (vllm/distributed/kv_events.py) and their msgpack wire format.

`BlockStored`, `BlockRemoved`, `AllBlocksCleared` carry vLLM's current field names and order.
Wire (as vLLM's msgspec encoder writes it since vLLM #42892): an EventBatch is the array
`[ts, [event, ...]]` plus `data_parallel_rank` when it is set; each event is a map tagged
`{"type": "BlockStored", ...}` holding every field in declaration order, except fields that have a
default and hold it (msgspec's omit_defaults). Hashes are the low 64 bits as unsigned ints.
The decoder also reads the older positional events (`["BlockStored", hashes, ...]`) and ignores
unknown keys. Leaves out: ZMQ framing (topic, sequence number), hybrid-model cache groups.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, fields
from typing import Any, BinaryIO

import msgpack

from radix.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

MEDIUM_GPU = "GPU"


@dataclass(frozen=True, slots=True)
class EventBatch:
    ts: float  # seconds (the engine's clock)
    events: tuple[BlockStored | BlockRemoved | AllBlocksCleared, ...]
    data_parallel_rank: int | None = None


KV_EVENT_TYPES = {cls.__name__: cls for cls in (BlockStored, BlockRemoved, AllBlocksCleared)}
_FIELDS = {name: fields(cls) for name, cls in KV_EVENT_TYPES.items()}
_SEQ_FIELDS = {"block_hashes", "token_ids", "extra_keys"}  # lists on the wire, tuples here


def _to_wire(value: Any) -> Any:
    return [_to_wire(v) for v in value] if isinstance(value, tuple) else value


def _from_wire(value: Any) -> Any:
    return tuple(_from_wire(v) for v in value) if isinstance(value, list) else value


def event_to_wire(event: Event) -> dict[str, Any]:
    """The tagged map msgspec writes for one event.

    >>> event_to_wire(BlockRemoved((7,), "GPU"))
    {'type': 'BlockRemoved', 'block_hashes': [7], 'medium': 'GPU'}
    """
    name = type(event).__name__
    if name not in _FIELDS:
        raise ValueError(f"not a KV cache event: {event!r}")
    out: dict[str, Any] = {"type": name}
    for f in _FIELDS[name]:
        value = getattr(event, f.name)
        if f.default is None and value is None:  # omit_defaults
            continue
        out[f.name] = _to_wire(value)
    return out


def event_from_wire(raw: Any, where: str = "event") -> Event:
    """One event from its tagged map (current vLLM) or tagged array (before vLLM #42892)."""
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        name, values = raw[0], raw[1:]
        if name in _FIELDS:
            raw = {"type": name, **{f.name: v for f, v in zip(_FIELDS[name], values)}}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a map tagged with 'type', got {type(raw).__name__}")
    name = raw.get("type")
    if name not in _FIELDS:
        raise ValueError(f"{where}: field 'type': unknown event type {name!r}")
    kwargs = {}
    for f in _FIELDS[name]:
        if f.name in raw:
            value = raw[f.name]
            if f.name in ("block_hashes", "parent_block_hash"):
                value = _hash_from_wire(value, f"{where}: field '{f.name}'")
            kwargs[f.name] = _from_wire(value) if f.name in _SEQ_FIELDS else value
        elif f.default is MISSING:
            if f.name not in ("medium", "lora_id", "lora_name"):  # older vLLMs lack these
                raise ValueError(f"{where}: field '{f.name}' is missing from {name}")
            kwargs[f.name] = None
    return KV_EVENT_TYPES[name](**kwargs)


def _hash_from_wire(value: Any, where: str) -> Any:
    """Hashes may be ints (vLLM's default) or raw bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0);
    bytes become their low 64 bits so both read the same."""
    if isinstance(value, list):
        return [_hash_from_wire(v, where) for v in value]
    if isinstance(value, bytes):
        return int.from_bytes(value[-8:], "big")
    if value is not None and not isinstance(value, int):
        raise ValueError(f"{where}: expected an int hash, got {type(value).__name__}")
    return value


def encode_batch(batch: EventBatch) -> bytes:
    """msgpack bytes of one batch, as vLLM's publisher sends them.

    >>> decode_batch(encode_batch(EventBatch(1.5, (AllBlocksCleared(),), 0)))
    EventBatch(ts=1.5, events=(AllBlocksCleared(),), data_parallel_rank=0)
    """
    wire: list[Any] = [float(batch.ts), [event_to_wire(e) for e in batch.events]]
    if batch.data_parallel_rank is not None:
        wire.append(batch.data_parallel_rank)
    return msgpack.packb(wire)


def batch_from_wire(raw: Any, where: str = "batch") -> EventBatch:
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise ValueError(f"{where}: expected [ts, events] or [ts, events, dp_rank]")
    ts, events = raw[0], raw[1]
    if not isinstance(ts, int | float):
        raise ValueError(f"{where}: field 'ts': expected a number, got {type(ts).__name__}")
    if not isinstance(events, list):
        raise ValueError(f"{where}: field 'events': expected a list")
    rank = raw[2] if len(raw) == 3 else None
    decoded = tuple(event_from_wire(e, f"{where}: event {i}") for i, e in enumerate(events))
    return EventBatch(float(ts), decoded, rank)


def decode_batch(data: bytes) -> EventBatch:
    """The batch in `data` (one msgpack object); raises ValueError naming the bad field."""
    try:
        raw = msgpack.unpackb(data, strict_map_key=False)
    except (msgpack.UnpackException, ValueError) as exc:
        raise ValueError(f"batch: not msgpack: {exc}") from exc
    return batch_from_wire(raw)


def write_batches(out: BinaryIO, batches: Iterable[EventBatch]) -> None:
    """A recording: the batches' msgpack payloads back to back (no ZMQ framing)."""
    for batch in batches:
        out.write(encode_batch(batch))


def read_batches(stream: BinaryIO) -> Iterator[EventBatch]:
    unpacker = msgpack.Unpacker(stream, strict_map_key=False)
    for i, raw in enumerate(unpacker):
        yield batch_from_wire(raw, f"batch {i}")


def batch_to_json(batch: EventBatch) -> str:
    """One JSON line: {"ts", "data_parallel_rank", "events": [tagged maps]}.

    >>> batch_to_json(EventBatch(2.0, (BlockRemoved((7,), "GPU"),)))
    '{"ts": 2.0, "data_parallel_rank": null, "events": [{"type": "BlockRemoved", \
"block_hashes": [7], "medium": "GPU"}]}'
    """
    events = [event_to_wire(e) for e in batch.events]
    return json.dumps({"ts": batch.ts, "data_parallel_rank": batch.data_parallel_rank,
                       "events": events})


def batch_from_json(line: str, where: str = "line") -> EventBatch:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(raw, dict) or "ts" not in raw or "events" not in raw:
        raise ValueError(f"{where}: expected an object with 'ts' and 'events'")
    return batch_from_wire([raw["ts"], raw["events"], raw.get("data_parallel_rank")], where)
