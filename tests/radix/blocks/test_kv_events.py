"""vLLM KV events: what the block cache emits, and the msgpack / JSON-lines wire format."""

from __future__ import annotations

import io

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from radix.blocks.hashing import hash_request_tokens, hash_to_int64
from radix.blocks.kv_events import (
    EventBatch,
    batch_from_json,
    batch_to_json,
    decode_batch,
    encode_batch,
    read_batches,
    write_batches,
)
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import AllBlocksCleared, BlockAllocated, BlockRemoved, BlockStored, ListSink
from radix.request import Req

hashes = st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=4).map(tuple)
stored = st.builds(
    BlockStored, hashes, st.none() | st.integers(0, 2**64 - 1),
    st.lists(st.integers(0, 2**31), max_size=8).map(tuple), st.integers(1, 64),
    st.none(), st.sampled_from(["GPU", None]), st.none() | st.text(max_size=5),
    st.none() | st.just((None, ("lora",))), st.none() | st.just(0),
    st.none() | st.just("full_attention"))
event = st.one_of(stored, st.builds(BlockRemoved, hashes, st.just("GPU")),
                  st.just(AllBlocksCleared()))
batch = st.builds(EventBatch, st.floats(0, 1e9), st.lists(event, max_size=5).map(tuple),
                  st.none() | st.integers(0, 7))


@given(batch)
def test_round_trip_msgpack_and_json(b):
    assert decode_batch(encode_batch(b)) == b
    assert batch_from_json(batch_to_json(b)) == b


def test_wire_shape_matches_vllm():
    """Outer batch positional [ts, events, dp_rank] with nil for no rank (msgspec does not omit
    defaults of array_like structs); events tagged maps in declaration order, required fields
    kept when None, defaulted ones left out when None (vLLM 0.33's structs)."""
    ev = BlockStored((5,), None, (1, 2), 2, None, "GPU", None, (None,), 0, "full_attention")
    raw = msgpack.unpackb(encode_batch(EventBatch(1.0, (ev, BlockRemoved((5,), "GPU")), 0)))
    assert raw[0] == 1.0 and raw[2] == 0
    assert list(raw[1][0]) == ["type", "block_hashes", "parent_block_hash", "token_ids",
                               "block_size", "lora_id", "medium", "lora_name", "extra_keys",
                               "group_idx", "kv_cache_spec_kind"]
    assert raw[1][1] == {"type": "BlockRemoved", "block_hashes": [5], "medium": "GPU"}
    assert msgpack.unpackb(encode_batch(EventBatch(1.0, ()))) == [1.0, [], None]


def test_reads_legacy_arrays_bytes_hashes_and_unknown_keys():
    """Older positional events, SGLang's BlockStored without lora_name, bytes hashes (kept as
    bytes, so they encode back the same), unknown keys ignored."""
    digest = bytes(7) + b"\x09"
    legacy = msgpack.packb([2.5, [["BlockStored", [7], None, [1, 2], 2, None],
                                  ["BlockRemoved", [digest]], ["AllBlocksCleared"]]])
    b = decode_batch(legacy)
    assert b.events[0] == BlockStored((7,), None, (1, 2), 2, None, None, None)
    assert b.events[1] == BlockRemoved((digest,), None) and b.events[2] == AllBlocksCleared()
    new = msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU",
                                "session_id": "x"}]])
    assert decode_batch(new).events == (BlockRemoved((3,), "GPU"),)
    sglang = msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [-5], "medium": "GPU",
                                   "parent_block_hash": None, "token_ids": [1, 2],
                                   "block_size": 2, "lora_id": None, "cache_salt": "s"}], 0])
    assert decode_batch(sglang).events == (BlockStored((-5,), None, (1, 2), 2, None, "GPU",
                                                       None),)


@pytest.mark.parametrize("raw, msg", [
    ([1.0, [{"type": "Nope"}]], "event 0: field 'type'"),
    ([1.0, [{"type": "BlockRemoved"}]], "field 'block_hashes' is missing"),
    (["x", []], "field 'ts'"),
    ([1.0, [{"type": "BlockRemoved", "block_hashes": ["a"], "medium": None}]], "block_hashes"),
])
def test_bad_batches_name_the_field(raw, msg):
    with pytest.raises(ValueError, match=msg):
        decode_batch(msgpack.packb(raw))


def test_recording_stream_round_trip():
    batches = [EventBatch(float(i), (BlockRemoved((i,), "GPU"),), 0) for i in range(3)]
    buf = io.BytesIO()
    write_batches(buf, batches)
    buf.seek(0)
    assert list(read_batches(buf)) == batches


def test_cache_emits_stored_and_removed():
    """block_size 4, blocks 1..2: a 9-token prompt stores blocks 0,1 (8 tokens) in one
    BlockStored chained from None. free walks 3,2,1 -> queue [3 (no hash, front), 2, 1]; a new
    8-token prompt pops 3 and 2, evicting only block 2's hash (the chain's second block)."""
    sink = ListSink()
    m = BlockCacheManager(BlockPool(4, block_size=4, sink=sink))
    r = Req("r", list(range(9)), extra_key="lora-a", cache_salt="s")
    m.allocate_slots(r, 9, m.get_computed_blocks(r))
    h = [hash_to_int64(x) for x in hash_request_tokens(list(range(9)), 4, "lora-a", "s")]
    [ev] = [e for e in sink.events if isinstance(e, BlockStored)]
    assert ev.block_hashes == tuple(h) and ev.parent_block_hash is None
    assert ev.token_ids == tuple(range(8)) and ev.lora_name == "lora-a"
    assert ev.extra_keys == (("lora-a", "s"), ("lora-a",))
    m.free(r)
    r2 = Req("r2", list(range(50, 58)))
    m.allocate_slots(r2, 8, m.get_computed_blocks(r2))
    removed = [e.block_hashes for e in sink.events if isinstance(e, BlockRemoved)]
    allocated = [e for e in sink.events if isinstance(e, BlockAllocated)][-1]
    assert allocated.block_ids == (3, 2) and removed == [(h[1],)]
    m.free(r2)
    assert m.reset_prefix_cache() and isinstance(sink.events[-2], AllBlocksCleared)


def test_no_sink_builds_no_events():
    m = BlockCacheManager(BlockPool(4, block_size=4))
    r = Req("r", list(range(9)))
    m.allocate_slots(r, 9, m.get_computed_blocks(r))
    assert m.pool._sink is None and m.pool._step == 0
