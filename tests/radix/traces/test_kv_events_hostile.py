"""Hostile KV-event recordings: every malformed value is one TraceError naming the line (JSON) or
the batch (msgpack) and the field, never a traceback; random values allow only TraceError."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from radix.traces.fields import TraceError
from radix.traces.kv_events import load_kv_events

STORED = {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None,
          "token_ids": [1, 2], "block_size": 2, "lora_id": None, "medium": "GPU",
          "lora_name": None}


def _stored(**change) -> dict:
    return {**STORED, **change}


def _json(ts, events) -> bytes:
    """Line 1 is a good batch, line 2 the bad one."""
    good = json.dumps({"ts": 1.0, "events": [STORED]})
    return (good + "\n" + json.dumps({"ts": ts, "events": events}) + "\n").encode()


def _msgpack(ts, events) -> bytes:
    return msgpack.packb([1.0, [STORED], None]) + msgpack.packb([ts, events, None])


CASES = [  # (name, ts, events, field, words)
    ("NaN ts", float("nan"), [], "ts", "not a finite time"),
    ("Inf ts", float("inf"), [], "ts", "not a finite time"),
    ("huge ts", 1e300, [], "ts", "not a finite time"),
    ("huge int ts", 10**30, [], "ts", "not a finite time"),
    ("negative block_size", 1.0, [_stored(block_size=-4)], "block_size", "outside 1.."),
    ("block_size string", 1.0, [_stored(block_size="4")], "block_size", "got str"),
    ("hash too negative", 1.0, [_stored(block_hashes=[-(2**63) - 1])], "block_hashes",
     "outside [-2**63, 2**64)"),
    ("hash 2**64", 1.0, [_stored(block_hashes=[2**64])], "block_hashes", "outside"),
    ("block_hashes an int", 1.0, [_stored(block_hashes=7)], "block_hashes",
     "expected a list of hashes, got int"),
    ("string token_ids", 1.0, [_stored(token_ids=["a", "b"])], "token_ids", "item 0 is 'a'"),
    ("type a list", 1.0, [{"type": ["BlockStored"]}], "type", "unknown event type"),
    ("parent a string", 1.0, [_stored(parent_block_hash="x")], "parent_block_hash",
     "expected an int hash"),
]


@pytest.mark.parametrize("name, ts, events, field, words", CASES, ids=[c[0] for c in CASES])
def test_json_line_names_line_and_field(name, ts, events, field, words):
    if isinstance(ts, int) and ts > 2**64:
        data = _json(0, events).replace(b'"ts": 0,', f'"ts": {ts},'.encode())
    else:
        data = _json(ts, events)
    with pytest.raises(TraceError) as info:
        load_kv_events(data)
    assert (info.value.line, info.value.field) == (2, field), str(info.value)
    assert words in str(info.value) and "line 2" in str(info.value)


@pytest.mark.parametrize("name, ts, events, field, words", CASES, ids=[c[0] for c in CASES])
def test_msgpack_batch_names_batch_and_field(name, ts, events, field, words):
    if isinstance(ts, int) and ts >= 2**64:
        ts = 1e300  # msgpack cannot carry the int; the float is refused the same way
    if "hash" in name and "parent" not in name:
        return  # msgpack cannot carry ints outside [-2**63, 2**64): only JSON can
    with pytest.raises(TraceError) as info:
        load_kv_events(_msgpack(ts, events))
    assert info.value.field == field, str(info.value)
    assert words in str(info.value) and "batch 2" in str(info.value)


def test_deep_nesting_and_list_keys_are_one_line():
    """100,000 nested arrays (msgpack and JSON) and a msgpack map keyed by a list."""
    with pytest.raises(TraceError, match="batch 1 .*nested deeper"):
        load_kv_events(b"\x91" * 100_000 + b"\xc0")
    with pytest.raises(TraceError, match="line 1.*nested deeper|line 1.*not valid JSON"):
        load_kv_events(b"[" * 100_000 + b"]" * 100_000)
    list_key = msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": [1], "medium": None,
                                      (1, 2): 3}]])
    with pytest.raises(TraceError, match="batch 1 .*key that is a list"):
        load_kv_events(list_key)


def test_sglang_variant_and_negative_hashes_load():
    """SGLang 0.5.23 writes BlockStored without lora_name (fixmap), medium maybe left out, and
    signed int64 hashes (first 16 hex digits): all read."""
    event = {"type": "BlockStored", "block_hashes": [-5, 7], "parent_block_hash": None,
             "token_ids": [1, 2, 3, 4], "block_size": 2, "lora_id": None}
    trace = load_kv_events(msgpack.packb([1.0, [event], 0]))
    stored = trace.batches[0].events[0]
    assert stored.block_hashes == (-5, 7) and stored.lora_name is None and stored.medium is None


scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6))
values = st.recursive(scalars | st.binary(max_size=8),
                      lambda kids: st.lists(kids, max_size=4)
                      | st.dictionaries(st.sampled_from(list(STORED) + ["x"]), kids, max_size=5),
                      max_leaves=20)
events = st.fixed_dictionaries({"type": st.sampled_from(["BlockStored", "BlockRemoved",
                                                          "AllBlocksCleared"]) | scalars},
                               optional={k: values for k in list(STORED)[1:]})
batches = st.lists(st.one_of(values, st.tuples(scalars | st.floats(0, 1e9),
                                               st.lists(events | values, max_size=3),
                                               scalars).map(list)), min_size=1, max_size=3)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(batches)
def test_random_values_give_a_trace_or_one_trace_error(raw):
    """Random msgpack and JSON values: the loader returns a Trace or raises TraceError only."""
    renderings = []
    try:
        renderings.append(b"".join(msgpack.packb(v, use_bin_type=True) for v in raw))
    except OverflowError:  # an int msgpack cannot carry
        pass
    try:
        renderings.append("\n".join(json.dumps(v) for v in raw).encode())
    except (TypeError, ValueError):  # bytes have no JSON form
        pass
    for data in renderings:
        try:
            load_kv_events(data)
        except TraceError as exc:
            assert "\n" not in str(exc)
