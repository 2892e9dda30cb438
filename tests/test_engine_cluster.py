"""`python -m engine serve --dp 3 --router kv-overlap` with the `openai` client: the router
reads the replicas' KV events over ZMQ and sends a conversation's next turn to the replica that
holds its prefix (cached_tokens > 0). Also: every router name is accepted by serve's config."""

from __future__ import annotations

import pytest
from enginehelp import engine_serve

from radix.cluster import ROUTERS as SHARED

# openai and the engine (torch): imported by _imports before this file's first test, so that
# collecting the suite imports neither
openai = ROUTERS = ClusterConfig = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global openai, ROUTERS, ClusterConfig
    openai = pytest.importorskip("openai")
    from engine.cluster import ROUTERS, ClusterConfig

MODEL = "SmolLM2-135M-Instruct"
SYSTEMS = ("You sell tents. Answer in one short sentence, politely, without lists or links.",
           "You are a train timetable clerk for the northern line; answer with times only.",
           "You translate English words to French and say nothing else, ever, at all.")


def test_every_shared_router_is_a_serve_router():
    assert set(SHARED) <= set(ROUTERS)
    assert ClusterConfig(router="prefix").router_name == "kv-overlap"
    with pytest.raises(ValueError, match="needs --kv-events-endpoint"):
        ClusterConfig(router="kv-overlap", kv_endpoint=None)


@pytest.mark.engine
def test_kv_overlap_sends_turn_two_to_its_prefix_holder():
    """Three conversations (different system prompts, so no shared full block) open cold:
    equal costs, the rotating tie-break spreads them over the three replicas. Each second
    turn repeats its first turn's prompt and reply, so the replica that served turn 1 holds
    those blocks (it published them as BlockStored): the router's cost is lowest there, and
    the replica reports whole cached blocks. The second turns go in reverse order, so the
    tie-break's rotation alone would send two of them to the wrong replica."""
    with engine_serve(extra=("--dp", "3", "--router", "kv-overlap")) as seen:
        assert "router=kv-overlap" in seen[0]
        client = openai.OpenAI(base_url=seen[0].split()[2], api_key="none")
        first = []
        for system in SYSTEMS:
            msgs = [{"role": "system", "content": system},
                    {"role": "user", "content": "Hello, one question please."}]
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, max_tokens=6, messages=msgs)
            first.append((msgs, raw.parse(), int(raw.headers["x-radixlens-replica"])))
        assert sorted(rank for *_, rank in first) == [0, 1, 2]
        for msgs, reply, rank in reversed(first):  # in turn order, ties alone would miss
            turn2 = [*msgs, {"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": "And a second question?"}]
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, max_tokens=4, messages=turn2)
            assert int(raw.headers["x-radixlens-replica"]) == rank
            cached = raw.parse().usage.prompt_tokens_details.cached_tokens
            assert cached > 0 and cached % 16 == 0
