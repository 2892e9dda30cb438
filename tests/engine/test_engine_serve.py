"""`python -m engine serve --dp 2` end to end: the official `openai` client, the prefix-aware
router, `cached_tokens`, and a `radix watch` subscriber rebuilding both replicas' block caches
exactly as the engine's own block shadows hold them.

One server for the module (a subprocess on free ports, SmolLM2 on CPU); short prompts and few
tokens, so the module runs in well under a minute on two cores after the model loads.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from enginehelp import engine_serve
from machine import seconds

from radix.blocks.hashing import VLLM_NONE_HASH_SEED, BlockHasher
from radix.watch.subscriber import Watcher, parse_endpoint

pytestmark = pytest.mark.engine
MODEL = "SmolLM2-135M-Instruct"
SYSTEM = ("You are the assistant of a shop for hiking gear. Answer every question about tents, "
          "stoves and boots in one short sentence.")


@pytest.fixture(scope="module")
def server():
    with engine_serve() as seen:
        endpoints = [line.split(": ", 1)[1].strip() for line in seen if "kv events rank" in line]
        yield seen[0].split()[2], endpoints


def _get(url: str, path: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + path, timeout=seconds(30)) as r:
        return json.load(r)


def _chat(client, question: str, **kw):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, max_tokens=4, messages=[{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": question}], **kw)
    return raw.parse(), int(raw.headers["x-radixlens-replica"])


def test_openai_client_whole_and_streamed(openai, server):
    url, _ = server
    client = openai.OpenAI(base_url=url, api_key="none")
    assert [m.id for m in client.models.list().data] == [MODEL]
    whole = client.completions.create(model=MODEL, prompt="The capital of France is",
                                      max_tokens=5)
    chunks = list(client.completions.create(model=MODEL, prompt="The capital of France is",
                                            max_tokens=5, stream=True,
                                            stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    assert streamed == whole.choices[0].text and "Paris" in streamed
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 5
    assert whole.choices[0].finish_reason == "length"
    chat = list(client.chat.completions.create(
        model=MODEL, max_tokens=40, stream=True, messages=[{"role": "user", "content": "Hi!"}]))
    assert chat[0].choices[0].delta.role == "assistant"
    assert chat[-1].choices[0].finish_reason == "stop"  # EOS well before 40 tokens
    with pytest.raises(openai.BadRequestError, match="context length"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=9_000)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")


def test_shared_prefix_goes_to_its_holder_and_reports_cached_tokens(openai, server):
    """A and B share the system prompt (its chat template is 38+ tokens: 2 full blocks of 16).
    A is cold (cached_tokens 0); B goes to A's replica and reports cached_tokens >= 32, whole
    blocks as vLLM counts them. A different cold prompt does not report any. Asked for SGLang's
    `return_cached_tokens_details`, B also gets `sglext.cached_tokens_details` with the radix
    tree's hit, token by token, all on the device (no host tier: SGLang's answer without HiCache);
    A's is at most the chat template's first tokens (cached by the earlier test's chat: under a
    block, so vLLM's cached_tokens is 0), or absent when it hit nothing."""
    url, _ = server
    client = openai.OpenAI(base_url=url, api_key="none")
    details = {"extra_body": {"return_cached_tokens_details": True}}
    a, rank_a = _chat(client, "Can I return a tent I used once?", **details)
    b, rank_b = _chat(client, "Do you sell gas for camping stoves?", **details)
    assert a.usage.prompt_tokens_details.cached_tokens == 0
    a_tree = (a.model_extra or {}).get("sglext", {}).get("cached_tokens_details")
    assert a_tree is None or (a_tree["host"] == 0 and 0 < a_tree["device"] < 16)
    assert rank_b == rank_a
    cached = b.usage.prompt_tokens_details.cached_tokens
    assert cached >= 32 and cached % 16 == 0 and cached < b.usage.prompt_tokens
    tree = b.model_extra["sglext"]["cached_tokens_details"]
    assert tree["host"] == 0 and cached <= tree["device"] < b.usage.prompt_tokens


def _shadows(url: str) -> list[dict]:
    return [{b["hash"]: b for b in _get(url, f"/debug/block_cache?rank={r}")["blocks"]}
            for r in (0, 1)]


def _same(watcher: Watcher, shadows: list[dict]) -> bool:
    for stream, shadow in zip(watcher.streams, shadows):
        cache = stream.cache
        view = {h: (b.parent_block_hash, cache.copies[h]) for h, b in cache.blocks.items()}
        if view != {h: (b["parent"], b["copies"]) for h, b in shadow.items()}:
            return False
    return True


def test_watchers_rebuild_both_replicas_exactly(openai, server):
    """A watcher from the start (live) and one that joins after the traffic (replay catch-up)
    both end equal to each replica's own block shadow: hashes, parents, copies; and each
    block's token ids hash (with its parent's digest) to the shadow's full digest."""
    url, endpoints = server
    client = openai.OpenAI(base_url=url, api_key="none")
    live = Watcher([parse_endpoint(e) for e in endpoints], replay_timeout=seconds(5))
    try:
        live.poll(0.1)
        for q in ("Are the boots waterproof?", "Which tent is lightest?", "Stove fuel?"):
            _chat(client, q, stream=False)
        for topic in ("a two-day hike in the Alps in early autumn", "a canoe trip on a lake"):
            # two cold prompts in a row: the router's round robin sends one to each replica
            list(client.completions.create(model=MODEL, prompt=f"A packing list for {topic}, "
                                           "written for a beginner who has never camped:",
                                           max_tokens=3, stream=True))
        late = Watcher([parse_endpoint(e) for e in endpoints], replay_timeout=seconds(5))
        try:
            shadows = _shadows(url)
            assert all(shadows), "both replicas served something (round robin when cold)"
            deadline = time.monotonic() + seconds(30)
            while not (_same(live, shadows) and _same(late, shadows)):
                assert time.monotonic() < deadline, [live.status(), late.status()]
                live.poll(0.05)
                late.poll(0.05)
            assert all(s.incomplete_since is None for s in live.status() + late.status())
            assert sum(s.replayed for s in late.status()) > 0
            info = _get(url, "/kv_events")  # how the server hashes (default: vLLM's sha256)
            hasher = BlockHasher(info["hash_algo"], info["hash_seed"] or VLLM_NONE_HASH_SEED)
            for stream, shadow in zip(late.streams, shadows):
                for h, block in stream.cache.blocks.items():
                    parent = shadow[h]["parent_hex"]
                    digest = hasher.hash_block(bytes.fromhex(parent) if parent else None,
                                               block.token_ids)
                    assert digest.hex() == shadow[h]["hash_hex"]
        finally:
            late.close()
    finally:
        live.close()
    info = _get(url, "/kv_events")
    assert info["dp"] == 2 and [p["rank"] for p in info["publishers"]] == [0, 1]
