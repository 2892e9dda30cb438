"""vLLM 0.33's KV cache events (vllm/distributed/kv_events.py) and their msgpack wire format.

Encoding runs msgspec over Structs made from radix/events.py's dataclasses, which mirror
vLLM's field for field (names, order, defaults; the options here), so the bytes equal vLLM's:
an EventBatch is the array [ts, [events], rank] with nil for no rank (omit_defaults does
nothing to array_like structs); each event is a map tagged {"type": "BlockStored", ...} holding
required fields (None as nil) and the defaulted ones that are not None; BlockStored's 15
fields make msgspec write a map16 header. The checked-in vectors (tests/data/vllm/, made by
vLLM's own code) test it byte for byte, both ways.
Decoding also reads SGLang 0.5.23's variant (no lora_name, medium left out, signed 64-bit
hashes), the older positional events and bytes hashes; it ignores unknown keys and names the
field of any bad value. Leaves out: ZMQ framing (topic, sequence number, replay).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, fields
from typing import Any, BinaryIO

import msgpack
import msgspec

from radix.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

MEDIUM_GPU = "GPU"
MAX_TS = 1e12  # seconds: a timestamp past this (year 33658) or not finite is refused
HASH_MIN, HASH_MAX = -(2**63), 2**64  # SGLang's signed int64 ... vLLM's unsigned low 64 bits


@dataclass(frozen=True, slots=True)
class EventBatch:
    ts: float  # seconds (the engine's clock)
    events: tuple[BlockStored | BlockRemoved | AllBlocksCleared, ...]
    data_parallel_rank: int | None = None


# --- the wire structs: vLLM's, field for field (from the dataclasses) -----------------------------

def _spec(cls: type) -> list[tuple]:
    """A dataclass's fields as msgspec.defstruct takes them (names, order, defaults), untyped:
    the Structs only encode (decoding reads plain msgpack, batch_from_wire)."""
    return [(f.name, Any) if f.default is MISSING else (f.name, Any, f.default)
            for f in fields(cls)]


class _Event(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


def _wire_struct(cls: type) -> type[msgspec.Struct]:
    """The wire Struct of one of radix/events.py's KV events, made from its dataclass (whose
    fields are vLLM's, field for field), so each event's fields are written once."""
    return msgspec.defstruct(cls.__name__, _spec(cls), bases=(_Event,), tag=cls.__name__,
                             module=__name__)


_Batch = msgspec.defstruct("_Batch", _spec(EventBatch), array_like=True, omit_defaults=True,
                           gc=False, module=__name__)
_WIRE = {cls: _wire_struct(cls) for cls in (BlockStored, BlockRemoved, AllBlocksCleared)}
KV_EVENT_TYPES = {cls.__name__: cls for cls in _WIRE}
_FIELDS = {name: fields(cls) for name, cls in KV_EVENT_TYPES.items()}
_REQUIRED = {name: [f.name for f in fs if f.default is not None] for name, fs in _FIELDS.items()}
_ENCODER = msgspec.msgpack.Encoder()


def _wire_event(event: Event) -> msgspec.Struct:
    cls = _WIRE.get(type(event))
    if cls is None:
        raise ValueError(f"not a KV cache event: {event!r}")
    values = []
    for f in _FIELDS[type(event).__name__]:
        v = getattr(event, f.name)
        if isinstance(v, tuple) and f.name != "extra_keys":
            v = [list(x) if isinstance(x, tuple) else x for x in v]
        elif f.name == "extra_keys" and v is not None:
            v = list(v)
        values.append(v)
    return cls(*values)


def encode_batch(batch: EventBatch) -> bytes:
    """msgpack bytes of one batch, exactly as vLLM 0.33's publisher writes them.

    >>> encode_batch(EventBatch(1.5, (AllBlocksCleared(),))).hex()
    '93cb3ff80000000000009181a474797065b0416c6c426c6f636b73436c6561726564c0'
    """
    events = [_wire_event(e) for e in batch.events]
    return _ENCODER.encode(_Batch(float(batch.ts), events, batch.data_parallel_rank))


def event_to_wire(event: Event) -> dict[str, Any]:
    """The tagged map vLLM writes for one event, as plain data (bytes kept as bytes).

    >>> event_to_wire(BlockRemoved((7,), "GPU"))
    {'type': 'BlockRemoved', 'block_hashes': [7], 'medium': 'GPU'}
    """
    return msgspec.msgpack.decode(_ENCODER.encode(_wire_event(event)))


# --- decoding: vLLM's bytes, SGLang's variant, older positional events ----------------------------

def decode_batch(data: bytes) -> EventBatch:
    """The batch in `data` (one msgpack object); raises ValueError naming the bad field.

    >>> decode_batch(bytes.fromhex("93cb3ff80000000000009181a474797065b0416c6c426c6f636b73"
    ...                            "436c6561726564c0"))
    EventBatch(ts=1.5, events=(AllBlocksCleared(),), data_parallel_rank=None)
    """
    try:
        raw = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(f"batch: not msgpack ({type(exc).__name__}: {exc})") from None
    return batch_from_wire(raw)


def batch_from_wire(raw: Any, where: str = "batch") -> EventBatch:
    """An EventBatch from its decoded array [ts, events] or [ts, events, rank]; trailing items
    are ignored, as vLLM's array_like decoder ignores them (radix watch recordings append the
    sequence number, the receive time and the source there)."""
    if not isinstance(raw, list | tuple) or len(raw) < 2:
        got = f"{len(raw)} items" if isinstance(raw, list | tuple) else _type(raw)
        raise ValueError(f"{where}: expected [ts, events] or [ts, events, dp_rank], got {got}")
    ts, events = raw[0], raw[1]
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise ValueError(f"{where}: field 'ts': expected a number, got {_type(ts)}")
    if not abs(ts) <= MAX_TS:  # also refuses NaN, whose comparisons are all False
        raise ValueError(f"{where}: field 'ts': {ts!r} is not a finite time within "
                         f"±{MAX_TS:.0e} s")
    if not isinstance(events, list | tuple):
        raise ValueError(f"{where}: field 'events': expected a list, got {_type(events)}")
    rank = raw[2] if len(raw) >= 3 else None
    if rank is not None and (not _is_int(rank) or not 0 <= rank < 2**31):
        raise ValueError(f"{where}: field 'data_parallel_rank': expected null or an int "
                         f">= 0, got {rank!r:.40}")
    decoded = tuple(event_from_wire(e, f"{where}: event {i}") for i, e in enumerate(events))
    return EventBatch(float(ts), decoded, rank)


def event_from_wire(raw: Any, where: str = "event") -> Event:
    """One event from its tagged map (vLLM, SGLang) or tagged array (before vLLM #42892)."""
    if isinstance(raw, list | tuple) and raw and isinstance(raw[0], str) and raw[0] in _FIELDS:
        raw = {"type": raw[0], **{f.name: v for f, v in zip(_FIELDS[raw[0]], raw[1:])}}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a map tagged with 'type', got {_type(raw)}")
    bad_key = next((k for k in raw if not isinstance(k, str)), None)
    if bad_key is not None:
        raise ValueError(f"{where}: a map key is {_type(bad_key)}, expected a field name")
    name = raw.get("type")
    if not isinstance(name, str) or name not in _FIELDS:
        raise ValueError(f"{where}: field 'type': unknown event type {name!r:.60}")
    kwargs = {}
    for f in _FIELDS[name]:
        if f.name in raw:
            kwargs[f.name] = _CHECKS[f.name](raw[f.name], f"{where}: field '{f.name}'")
        elif f.name in ("medium", "lora_id", "lora_name"):  # SGLang and older vLLMs omit them
            kwargs[f.name] = None
        elif f.name in _REQUIRED[name]:
            raise ValueError(f"{where}: field '{f.name}' is missing from {name}")
    return KV_EVENT_TYPES[name](**kwargs)


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hash(value: Any, where: str) -> int | bytes:
    if isinstance(value, dict) and set(value) == {"bytes"}:  # the JSON rendering of bytes
        value = _hex(value["bytes"], where)
    if isinstance(value, bytes) and 0 < len(value) <= 64:
        return value
    if not _is_int(value):
        raise ValueError(f"{where}: expected an int hash, got {_type(value)}")
    if not HASH_MIN <= value < HASH_MAX:
        raise ValueError(f"{where}: hash {value} is outside [-2**63, 2**64)")
    return value


def _hex(text: Any, where: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: 'bytes' must be a hex string") from None


def _hashes(value: Any, where: str) -> tuple:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: expected a list of hashes, got {_type(value)}")
    return tuple(_hash(v, where) for v in value)


def _opt(check):
    return lambda value, where: None if value is None else check(value, where)


def _int(lo: int, hi: int):
    def check(value: Any, where: str) -> int:
        if not _is_int(value):
            raise ValueError(f"{where}: expected an int, got {_type(value)}")
        if not lo <= value <= hi:
            raise ValueError(f"{where}: {value} is outside {lo}..{hi}")
        return value
    return check


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {_type(value)}")
    return value


def _tokens(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: expected a list of token ids, got {_type(value)}")
    for i, t in enumerate(value):
        if not _is_int(t) or not 0 <= t < 2**63:
            raise ValueError(f"{where}: item {i} is {t!r:.40} ({_type(t)}), expected a token "
                             "id (an int >= 0)")
    return tuple(value)


def _frozen(value: Any, where: str) -> Any:
    """An extra key: lists become tuples, {"bytes": hex} becomes bytes (JSON)."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v, where) for v in value)
    if isinstance(value, dict) and set(value) == {"bytes"}:
        return _hex(value["bytes"], where)
    if value is None or isinstance(value, str | int | float | bytes):
        return value
    raise ValueError(f"{where}: an extra key holds {_type(value)}")


def _extra_keys(value: Any, where: str) -> tuple:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: expected a list (one entry per block), got {_type(value)}")
    for v in value:
        if v is not None and not isinstance(v, list | tuple):
            raise ValueError(f"{where}: an entry is {_type(v)}, expected a list or null")
    return _frozen(value, where)


def _lookahead(value: Any, where: str) -> tuple:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: expected a list of token lists, got {_type(value)}")
    return tuple(_tokens(v, where) for v in value)


_CHECKS = {
    "block_hashes": _hashes, "parent_block_hash": _opt(_hash), "token_ids": _tokens,
    "block_size": _int(1, 2**31), "lora_id": _opt(_int(-(2**63), 2**64 - 1)),
    "medium": _opt(_str), "lora_name": _opt(_str), "extra_keys": _opt(_extra_keys),
    "group_idx": _opt(_int(0, 2**31)), "kv_cache_spec_kind": _opt(_str),
    "kv_cache_spec_sliding_window": _opt(_int(0, 2**62)), "locality": _opt(_str),
    "ownership": _opt(_str), "session_id": _opt(_str), "lookahead_token_ids": _opt(_lookahead),
}


# --- recordings and the JSON rendering ----------------------------------------------------------

def write_batches(out: BinaryIO, batches: Iterable[EventBatch]) -> None:
    """A recording: the batches' msgpack payloads back to back (no ZMQ framing)."""
    for batch in batches:
        out.write(encode_batch(batch))


def read_batches(stream: BinaryIO) -> Iterator[EventBatch]:
    unpacker = msgpack.Unpacker(stream, strict_map_key=False)
    for i, raw in enumerate(unpacker):
        yield batch_from_wire(raw, f"batch {i}")


def jsonable(value: Any) -> Any:
    """A wire value as JSON can hold it: bytes become {"bytes": hex}, tuples lists.

    >>> jsonable({"block_hashes": [b"\\x0a", 7], "extra_keys": [("lora", None)]})
    {'block_hashes': [{'bytes': '0a'}, 7], 'extra_keys': [['lora', None]]}
    """
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def batch_to_json(batch: EventBatch) -> str:
    """One JSON line: {"ts", "data_parallel_rank", "events": [tagged maps]}; a bytes hash is
    {"bytes": hex}. batch_from_json reads it back to the same batch.

    >>> batch_to_json(EventBatch(2.0, (BlockRemoved((7,), "GPU"),)))
    '{"ts": 2.0, "data_parallel_rank": null, "events": [{"type": "BlockRemoved", \
"block_hashes": [7], "medium": "GPU"}]}'
    """
    events = [jsonable(event_to_wire(e)) for e in batch.events]
    return json.dumps({"ts": batch.ts, "data_parallel_rank": batch.data_parallel_rank,
                       "events": events})


def batch_from_json(line: str, where: str = "line") -> EventBatch:
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{where}: not JSON: {str(exc)[:80]}") from None
    if not isinstance(raw, dict) or "ts" not in raw or "events" not in raw:
        raise ValueError(f"{where}: expected an object with 'ts' and 'events'")
    return batch_from_wire([raw["ts"], raw["events"], raw.get("data_parallel_rank")], where)

