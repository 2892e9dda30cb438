"""`python -m engine serve --dp 3 --router kv-overlap` with the `openai` client: the router
reads the replicas' KV events over ZMQ and sends a conversation's next turn to the replica that
holds its prefix (cached_tokens > 0). Also: every router name is accepted by serve's config, and
a client's session id (vLLM's and SGLang's names) reaches the session router, on simulated
replicas."""

from __future__ import annotations

from functools import partial

import pytest
from enginehelp import engine_serve, sim_serve
from machine import poll_until, seconds

from radix.cluster import ROUTERS as SHARED

# the engine (torch): imported by _imports before this file's first test, so that collecting the
# suite imports no torch (openai: tests/engine/conftest.py's fixture)
ROUTERS = ClusterConfig = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global ROUTERS, ClusterConfig
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
def test_kv_overlap_sends_turn_two_to_its_prefix_holder(openai):
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


def test_session_ids_reach_the_session_router_over_http(openai):
    """Three conversations, each sending its id where one of the anchors reads it: vLLM
    0.33's body field `session_id`, vLLM's `X-Session-ID` header, SGLang's `X-SMG-Routing-Key`
    header. The session router (consistent hash ring, 3 replicas) must send both turns of each
    to the ring's owner of that id (ids chosen so the owners are 0, 1, 2), and turn 2 then
    finds turn 1's prompt cached there (the simulated replica's block cache: whole blocks of
    16 characters). Without the id, serve would hash each request's own id and scatter the
    turns. Then the precedence (vLLM's order): body over X-Session-ID over X-SMG-Routing-Key."""
    from engine.openai_api import ROUTING_KEY_HEADER, SESSION_HEADER
    from radix.cluster.simple import SessionRouter

    ring = SessionRouter(3)
    by_owner: dict[int, str] = {}
    for i in range(100):
        by_owner.setdefault(ring.owner(f"conv-{i}"), f"conv-{i}")
    ids = [by_owner[r] for r in range(3)]
    carriers = [lambda s: {"extra_body": {"session_id": s}},
                lambda s: {"extra_headers": {SESSION_HEADER: s}},
                lambda s: {"extra_headers": {ROUTING_KEY_HEADER: s}}]
    with sim_serve(3, "session") as (base, _):
        url = base + "/v1"
        client = openai.OpenAI(base_url=url, api_key="none")

        def ask(msgs, **carry):
            raw = client.chat.completions.with_raw_response.create(
                model="sim", max_tokens=4, messages=msgs, **carry)
            return raw.parse(), int(raw.headers["x-radixlens-replica"])

        for rank, (sid, carry) in enumerate(zip(ids, carriers)):
            msgs = [{"role": "system", "content": f"Conversation {sid}: answer briefly."},
                    {"role": "user", "content": "Hello, one question please."}]
            reply, got = ask(msgs, **carry(sid))
            assert got == rank, (sid, carry(sid))
            msgs += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": "And a second one?"}]
            reply, got = ask(msgs, **carry(sid))
            assert got == rank and reply.usage.prompt_tokens_details.cached_tokens >= 32
        one = [{"role": "user", "content": "precedence"}]
        both = {SESSION_HEADER: ids[1], ROUTING_KEY_HEADER: ids[2]}
        assert ask(one, extra_body={"session_id": ids[0]}, extra_headers=both)[1] == 0
        assert ask(one, extra_headers=both)[1] == 1
        assert ask(one, extra_body={"vllm_xargs": {"session_id": ids[0]}},
                   extra_headers={ROUTING_KEY_HEADER: ids[2]})[1] == 0


def _kill(replica) -> None:
    """Ends a simulated replica's loop: its runner fails on the next prefill."""
    def crash(*args):
        raise RuntimeError("the runner broke")
    replica.runner.extend = crash
    with pytest.raises(RuntimeError, match="runner broke"):
        replica.submit([1, 2, 3], 1).result(timeout=seconds(30))


def test_every_router_keeps_off_a_dead_replica_until_it_is_back():
    """dp 2, replica 0 loaded (10,000 tokens in flight, so the load-aware routers would pick
    1), replica 1's loop dead: for every router, 12 prompts with their own sessions all go to
    replica 0, some of them by failover (the router chose 1). kv-overlap's replicas publish
    on ZMQ: after `revive_after_s` 0 the dead one is replaced at the next route, and its
    stream's AllBlocksCleared reaches kv-overlap's index (the dead one's blocks forgotten)."""
    from engine.backends import simulated
    from engine.cluster import Cluster
    from engine.service import EngineService
    from scenarios.classroom import SimLoaded

    for router in SHARED:
        kv = ({"kv_endpoint": "tcp://127.0.0.1:0", "kv_replay_endpoint": "tcp://127.0.0.1:0"}
              if router == "kv-overlap" else {"kv_endpoint": None, "kv_replay_endpoint": None})
        revive = 0.0 if router == "kv-overlap" else None
        cluster = Cluster(SimLoaded(), ClusterConfig(
            dp=2, router=router, capacity_tokens=1_024, revive_after_s=revive, **kv),
            partial(EngineService, backend=simulated()))
        try:
            cluster.started(0, 10_000)
            _kill(cluster.replicas[1])
            if revive is None:
                routes = [cluster.route([i, i + 1, i + 2] * 6, 4, f"s{i}") for i in range(12)]
                assert {r.rank for r in routes} == {0}, router
                assert any(r.decision.reason == "failover" for r in routes), router
                cluster.revive(1)
            else:
                cluster.route([1, 2, 3], 4)  # sees the death, revives at once (0 s)
                feed = cluster.feed
                poll_until(lambda f=feed: f.drain() or f.watcher.streams[1].cache.num_cleared,
                           30, lambda f=feed: f.watcher.status())
            assert cluster.live() == [True, True] and cluster.revived == [0, 1], router
        finally:
            cluster.close()
