"""Regenerates tests/data/vllm/*.json from vLLM's own code (a tool, not a test: needs the wheel).

Loads vllm/distributed/kv_events.py (the msgspec structs), vllm/utils/hashing.py and
vllm/v1/core/kv_cache_utils.py from an unpacked vLLM wheel (checked with 0.33.0) through
tools/diff_vllm.py's loader, then writes:
  kv_event_vectors.json  EventBatches encoded by vLLM's structs and msgspec's Encoder, as its
                         publisher does: every event kind, rank unset and set, lora_name, media,
                         extra_keys, bytes hashes, groups, cache-spec fields, every optional field
  hash_vectors.json      NONE_HASH and per-block hashes from init_none_hash / the request block
                         hasher, for sha256 and sha256_cbor, LoRA (name + path) and cache_salt,
                         with PYTHONHASHSEED unset (vLLM's fixed seed) and set to 42

    pip install msgspec==0.23.0 cbor2==6.3.0
    env -u PYTHONHASHSEED python tools/make_vllm_vectors.py /tmp/vllm/ex
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diff_vllm import load_vllm  # noqa: E402
from wheels import wheel_args, wheel_parser  # noqa: E402

from radix.blocks.kv_events import jsonable  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm"
TS = 1_700_000_000.25


STORED = dict(block_hashes=[0x0123456789ABCDEF], parent_block_hash=None, token_ids=[1, 2, 3, 4],
              block_size=4, lora_id=None, medium="GPU", lora_name=None)


def event_cases() -> list[tuple[str, list[tuple[str, dict]], int | None]]:
    """(description, [(event class, fields)], data_parallel_rank)."""
    stored, removed = "BlockStored", "BlockRemoved"
    big = dict(STORED, block_hashes=[0xFEDCBA9876543210, 42], parent_block_hash=0x0123456789ABCDEF,
               token_ids=list(range(10, 18)), lora_id=7, lora_name="sql-lora",
               extra_keys=[("sql-lora", ("mm-abc", 2), "salt-1"), ("sql-lora",)], group_idx=0)
    every = dict(STORED, medium="CPU", extra_keys=[None], group_idx=1,
                 kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=4096,
                 locality="LOCAL", ownership="tier-x", session_id="sess-1",
                 lookahead_token_ids=[[5, 6]])
    return [
        ("no events, rank unset", [], None),
        ("no events, rank 0", [], 0),
        ("BlockStored, required fields only", [(stored, STORED)], None),
        ("BlockStored, medium None", [(stored, dict(STORED, medium=None))], None),
        ("BlockStored, LoRA, extra keys, parent, hash >= 2**63, group 0, rank 0",
         [(stored, big)], 0),
        ("BlockStored, every optional field (sliding window group 1, CPU)", [(stored, every)], 7),
        ("BlockStored, bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)",
         [(stored, dict(STORED, block_hashes=[bytes(range(32))], parent_block_hash=b"\xaa" * 32))],
         None),
        ("BlockStored, multi-group: full attention group 0, sliding window group 1",
         [(stored, dict(STORED, group_idx=0, kv_cache_spec_kind="full_attention")),
          (stored, dict(STORED, group_idx=1, kv_cache_spec_kind="sliding_window",
                        kv_cache_spec_sliding_window=128))], 2),
        ("BlockRemoved, group unset", [(removed, dict(block_hashes=[42], medium="GPU"))], None),
        ("BlockRemoved, group 0, rank 3",
         [(removed, dict(block_hashes=[2**64 - 1], medium="GPU", group_idx=0))], 3),
        ("BlockRemoved, every optional field",
         [(removed, dict(block_hashes=[1], medium="STORAGE", group_idx=2, locality="REMOTE",
                         ownership="tier-y"))], None),
        ("AllBlocksCleared", [("AllBlocksCleared", {})], None),
        ("mixed batch", [(stored, STORED), (removed, dict(block_hashes=[9], medium=None)),
                         ("AllBlocksCleared", {})], 1),
    ]


def kv_event_vectors(v) -> dict:
    import msgspec

    encoder = msgspec.msgpack.Encoder()  # as ZmqEventPublisher._publisher_thread
    decoder = msgspec.msgpack.Decoder(v.events.KVEventBatch)
    out = []
    for description, events, rank in event_cases():
        batch = v.events.KVEventBatch(
            ts=TS, events=[getattr(v.events, name)(**fields) for name, fields in events],
            data_parallel_rank=rank)
        data = encoder.encode(batch)
        assert encoder.encode(decoder.decode(data)) == data
        out.append({"description": description, "ts": TS, "data_parallel_rank": rank,
                    "events": [jsonable({"type": name, **fields}) for name, fields in events],
                    "hex": data.hex()})
    return {"source": "vllm/distributed/kv_events.py, msgspec.msgpack.Encoder()",
            "msgspec": msgspec.__version__, "vectors": out}


HASH_CASES = [  # (name, tokens, block_size, (lora name, lora path) or None, cache_salt)
    ("plain, block 4", list(range(1, 11)), 4, None, None),
    ("plain, block 16", list(range(100, 140)), 16, None, None),
    ("int widths", [0, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**40], 2, None, None),
    ("LoRA on every block", list(range(1, 9)), 4, ("sql-lora", "/adapters/sql"), None),
    ("cache_salt on block 0", list(range(1, 9)), 4, None, "tenant-a"),
    ("LoRA and cache_salt", list(range(1, 13)), 4, ("sql-lora", "/adapters/sql"), "tenant-a"),
]


SEEDED = "42"  # a PYTHONHASHSEED, as an engine started with PYTHONHASHSEED=42 seeds NONE_HASH


def hash_vectors(v) -> dict:
    out = []
    for algo, seed in (("sha256", None), ("sha256_cbor", None), ("sha256", SEEDED),
                       ("sha256_cbor", SEEDED)):
        fn = v.hashing.get_hash_fn_by_name(algo)
        if seed is not None:  # vLLM reads the variable itself (resolve_none_hash_seed)
            os.environ["PYTHONHASHSEED"] = seed
        try:
            v.utils.init_none_hash(fn)
        finally:
            os.environ.pop("PYTHONHASHSEED", None)
        cases = []
        for name, tokens, bs, lora, salt in HASH_CASES:
            request = SimpleNamespace(
                block_hashes=[], num_tokens=len(tokens), all_token_ids=list(tokens),
                mm_features=[], cache_salt=salt, prompt_embeds=None,
                _prompt_embeds_per_block_hashes={},
                lora_request=lora and SimpleNamespace(lora_name=lora[0], lora_path=lora[1],
                                                      name=lora[0]))
            hashes = v.utils.get_request_block_hasher(bs, fn)(request)
            cases.append({"name": name, "tokens": tokens, "block_size": bs,
                          "lora_name": lora and lora[0], "lora_path": lora and lora[1],
                          "cache_salt": salt, "block_hashes": [bytes(h).hex() for h in hashes],
                          "event_ints": [v.utils.maybe_convert_block_hash(h) for h in hashes]})
        out.append({"algo": algo, "seed": v.utils.get_none_hash_seed(),
                    "none_hash": bytes(v.utils.NONE_HASH).hex(), "cases": cases})
    return {"source": "vllm/v1/core/kv_cache_utils.py (init_none_hash, get_request_block_hasher)"
                      " over vllm/utils/hashing.py", "algos": out}


def main() -> int:
    ap = wheel_parser(__doc__, "vllm")
    ap.add_argument("--out", type=Path, default=OUT)
    args = wheel_args(ap, "vllm/distributed/kv_events.py")
    if "PYTHONHASHSEED" in os.environ:
        ap.error("run with PYTHONHASHSEED unset (env -u PYTHONHASHSEED ...): vLLM's seed is "
                 "then its fixed 'vllm-none-hash'")
    v = load_vllm(args.root)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in (("kv_event_vectors.json", kv_event_vectors(v)),
                       ("hash_vectors.json", hash_vectors(v))):
        (args.out / name).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
