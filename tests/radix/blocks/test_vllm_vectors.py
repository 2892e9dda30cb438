"""Byte-for-byte against vLLM 0.33's own code: KV-event batches and block hashes, from vectors
that tools/make_vllm_vectors.py made by running vLLM's structs and hashing (tests/data/vllm/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radix.blocks.hashing import BlockHasher, hash_request_tokens, hash_to_int64
from radix.blocks.kv_events import (
    EventBatch,
    batch_from_json,
    batch_to_json,
    decode_batch,
    encode_batch,
    event_from_wire,
)
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import BlockStored
from radix.request import Req

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"
KV = json.loads((DATA / "kv_event_vectors.json").read_text())["vectors"]
HASHES = json.loads((DATA / "hash_vectors.json").read_text())["algos"]
ALGO = {"sha256": "vllm-sha256", "sha256_cbor": "vllm-sha256-cbor"}


def _ours(vector: dict) -> EventBatch:
    """The batch built from the vector's fields (not from its bytes)."""
    events = tuple(event_from_wire(e) for e in vector["events"])
    return EventBatch(vector["ts"], events, vector["data_parallel_rank"])


@pytest.mark.parametrize("vector", KV, ids=[v["description"] for v in KV])
def test_our_bytes_equal_vllms(vector):
    assert encode_batch(_ours(vector)).hex() == vector["hex"]


@pytest.mark.parametrize("vector", KV, ids=[v["description"] for v in KV])
def test_vllms_bytes_decode_to_the_same_events(vector):
    batch = decode_batch(bytes.fromhex(vector["hex"]))
    assert batch == _ours(vector)
    assert batch_from_json(batch_to_json(batch)) == batch  # the JSON rendering round-trips


def test_vectors_cover_every_kind_and_field():
    """The vectors hold all three kinds, rank unset and set, and every optional field set."""
    kinds = {e["type"] for v in KV for e in v["events"]}
    ranks = {v["data_parallel_rank"] is None for v in KV}
    keys = {k for v in KV for e in v["events"] for k in e}
    assert kinds == {"BlockStored", "BlockRemoved", "AllBlocksCleared"} and ranks == {True, False}
    assert {"lora_name", "medium", "extra_keys", "group_idx", "kv_cache_spec_kind",
            "kv_cache_spec_sliding_window", "locality", "ownership", "session_id",
            "lookahead_token_ids"} <= keys


CASES = [(a, c) for a in HASHES for c in a["cases"]]


@pytest.mark.parametrize("algo, case", CASES,
                         ids=[f"{a['algo']} seed {a['seed']}: {c['name']}" for a, c in CASES])
def test_block_hashes_equal_vllms(algo, case):
    lora = case["lora_name"]
    hasher = BlockHasher(ALGO[algo["algo"]], algo["seed"],
                         {lora: case["lora_path"]} if lora else {})
    assert hasher.none_hash.hex() == algo["none_hash"]
    hashes = hash_request_tokens(case["tokens"], case["block_size"], lora, case["cache_salt"],
                                 hash_algo=hasher)
    assert [h.hex() for h in hashes] == case["block_hashes"]
    assert [hash_to_int64(h) for h in hashes] == case["event_ints"]


def test_manager_publishes_vllms_event_hashes():
    """A 10-token request in blocks of 4 through BlockCacheManager(hash_algo="vllm-sha256"):
    its BlockStored carries the event ints vLLM computes for the same tokens (2 full blocks)."""
    case = next(c for a in HASHES if a["algo"] == "sha256" for c in a["cases"]
                if c["name"] == "plain, block 4")
    manager = BlockCacheManager(BlockPool(8, 4, enable_kv_cache_events=True), "vllm-sha256")
    req = Req("r", case["tokens"])
    manager.allocate_slots(req, len(case["tokens"]), manager.get_computed_blocks(req))
    (stored,) = manager.take_events()
    assert isinstance(stored, BlockStored) and list(stored.block_hashes) == case["event_ints"]
    assert manager.take_events() == []


def test_vllm_mode_needs_the_lora_path():
    with pytest.raises(ValueError, match="lora_paths"):
        hash_request_tokens([1, 2, 3, 4], 4, "sql-lora", hash_algo="vllm-sha256")
    with pytest.raises(ValueError, match="hash_algo must be one of"):
        BlockHasher("md5")
