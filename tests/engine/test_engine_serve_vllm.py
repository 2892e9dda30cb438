"""`engine serve` as a vLLM consumer sees it: vLLM's block hashes, a PUB endpoint bound as named.

One server (a subprocess, --dp 1, SmolLM2 on CPU) started as
`PYTHONHASHSEED=42 python -m engine serve --hash vllm-sha256 --kv-events-endpoint
tcp://127.0.0.1:0 --kv-replay-endpoint tcp://127.0.0.1:0`: a concrete host, which vLLM's rule
would connect to (nobody binds there, so nothing would arrive). The expected hashes come from
vLLM 0.33's own code (tests/data/vllm/hash_vectors.json, made by tools/make_vllm_vectors.py with
PYTHONHASHSEED=42: init_none_hash + get_request_block_hasher); the wheel is not needed here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from enginehelp import engine_serve
from machine import seconds

from radix.watch.subscriber import Watcher, parse_endpoint
from scenarios.watch import discover, http_json

pytestmark = pytest.mark.engine
VECTORS = json.loads((Path(__file__).resolve().parents[1] / "data" / "vllm" /
                      "hash_vectors.json").read_text())["algos"]
SERVE = [sys.executable, "-m", "engine", "serve", "--port", "0", "--dp", "1", "--device", "cpu",
         "--capacity", "2048", "--hash", "vllm-sha256", "--kv-events-endpoint",
         "tcp://127.0.0.1:0", "--kv-replay-endpoint", "tcp://127.0.0.1:0"]


def _vector(algo: str, seed: str, name: str) -> dict:
    return next(c for a in VECTORS if a["algo"] == algo and a["seed"] == seed
                for c in a["cases"] if c["name"] == name)


@pytest.fixture(scope="module")
def server():
    env = {**os.environ, "PYTHONHASHSEED": "42"}
    with engine_serve(argv=SERVE, env=env) as seen:
        yield seen[0].split()[2], seen


def _complete(url: str, tokens: list[int]) -> None:
    http_json(url + "/completions", {"model": "SmolLM2-135M-Instruct", "prompt": tokens,
                                     "max_tokens": 1}, timeout=seconds(120))


def test_served_hashes_equal_vllms_hash_block_tokens(server):
    """Prompt 100..139 (40 tokens, blocks of 16: two full blocks). vLLM hashes them, seeded by
    PYTHONHASHSEED=42, to the vector's digests; the served BlockStored carries their low 64
    bits (vLLM's int event hashes), and the replica's own block cache holds the full digests."""
    url, seen = server
    assert "block hashes: vllm-sha256, NONE_HASH seed '42' from PYTHONHASHSEED\n" in seen
    case = _vector("sha256", "42", "plain, block 16")
    _complete(url, case["tokens"])
    (spec,) = discover(url)
    with Watcher([parse_endpoint(spec)], replay_timeout=5) as w:
        w.start()  # a late join: the replay holds the request's batch
        blocks = w.streams[0].cache.blocks
        assert list(blocks) == case["event_ints"] and w.status()[0].exact
        assert [list(b.token_ids) for b in blocks.values()] == [case["tokens"][:16],
                                                               case["tokens"][16:32]]
    shadow, _ = http_json(url.removesuffix("/v1") + "/debug/block_cache?rank=0")
    assert [b["hash_hex"] for b in shadow["blocks"]] == case["block_hashes"]
    info, _ = http_json(url.removesuffix("/v1") + "/kv_events")
    assert (info["hash_algo"], info["hash_seed"]) == ("vllm-sha256", "42")


def test_a_concrete_pub_endpoint_is_bound_and_advertised_reachable(server):
    """The printed endpoints and /kv_events name 127.0.0.1 with the ports bound (not :0), the
    PUB socket binds (pub_binds), and a subscriber from /kv_events receives live batches."""
    url, seen = server
    (line,) = [x for x in seen if x.startswith("kv events rank 0: ")]
    printed = line.split(": ", 1)[1].strip()
    info, _ = http_json(url.removesuffix("/v1") + "/kv_events")
    (pub,) = info["publishers"]
    assert printed == f"{pub['endpoint']},{pub['replay_endpoint']}" and pub["pub_binds"]
    assert pub["endpoint"].startswith("tcp://127.0.0.1:") and not pub["endpoint"].endswith(":0")
    (spec,) = discover(url)
    with Watcher([parse_endpoint(spec)], replay_timeout=5) as w:
        w.start()
        deadline, first = time.monotonic() + seconds(60), 1_000
        while w.streams[0].last_live is None:  # a new prompt per round: its batch goes live
            assert time.monotonic() < deadline, w.status()
            _complete(url, list(range(first, first + 16)))
            first += 16
            for _ in range(10):
                w.poll(0.1)
        assert w.status()[0].exact

