"""The host tier in the engine (engine/hosttier.py) on the real default model (SmolLM2, CPU fp32).

A device pool of 120 tokens holds two of the ~57-token prompts below (and their replies), so a
third demotes the least recent one to host; running it again loads its rows back from the host
pool. Oracles: a cold run's greedy text and prefill logits (within 1e-4), and the model's own
`replay_host_tier` on the same requests (their replies as recorded: output[:-1], the tokens
with KV) for the device / host / miss split and the tokens moved.
"""

from __future__ import annotations

import pytest

from radix.request import Req
from radix.traces.trace import Trace, TraceRequest

torch = KVPool = ModelRunner = build_host_tier = replay_host_tier = None

pytestmark = pytest.mark.engine
TOL = 1e-4
POOL = 120
TOPICS = ("the rivers of South America", "volcanoes of Iceland", "the deserts of Australia",
          "lakes of Canada")


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, KVPool, ModelRunner, build_host_tier, replay_host_tier
    import torch

    from engine.hosttier import build_host_tier
    from engine.kv_pool import KVPool
    from engine.runner import ModelRunner
    from radix.hosttier.replay import replay_host_tier


def _prompt(smol, topic: str) -> list[int]:
    messages = [{"role": "system", "content": f"You are a tutor. Today's lesson is about {topic}; "
                 "answer in one short sentence, and name one example with its country."},
                {"role": "user", "content": f"Tell me one fact about {topic}, please."}]
    return list(smol.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                   tokenize=True, return_dict=True)["input_ids"])


def _engine(smol, ratio: float, policy: str = "write_through"):
    pool = KVPool.for_model(smol.model.config, POOL, smol.dtype, "cpu")
    return build_host_tier(pool, ModelRunner(smol.model, pool), ratio, write_policy=policy)


def _run(sched, rid: str, prompt: list[int], new: int = 4):
    """Runs one request to its end; returns it and the logits of its prefill."""
    req = Req(rid, list(prompt), max_new_tokens=new, arrival=sched.clock())
    sched.add_request(req)
    assert sched.step().kind == "prefill"
    logits = sched.runner.last_logits[0].clone()
    while sched.has_work:
        sched.step()
    return req, logits


def _replay(reqs, ratio: float, policy: str = "write_through"):
    trace = Trace("request", [TraceRequest(r.rid, float(i), tuple(r.origin_input_ids),
                                           len(r.output_ids), output_ids=tuple(r.output_ids[:-1]))
                              for i, r in enumerate(reqs)])
    split = []
    run = replay_host_tier(trace, POOL, ratio, policy,
                           on_request=lambda k, s: split.append(s[:3]))
    return run, split


@pytest.fixture(scope="module")
def served(smol):
    """A, B, C (C's match splits A's node, so LRU demotes B), then B again (a host hit; it
    demotes A's tail to make room), D, at host ratio 2."""
    a, b, c, d = (_prompt(smol, t) for t in TOPICS)
    sched = _engine(smol, 2.0)
    runs = [_run(sched, rid, p) for rid, p in (("a", a), ("b", b), ("c", c), ("b2", b),
                                               ("d", d))]
    return sched, runs


def test_a_prompt_loaded_back_from_host_gives_the_cold_text_and_logits(smol, served):
    sched, runs = served
    (first, _), (warm, warm_logits) = runs[1], runs[3]
    m = warm.metrics
    assert len(warm.origin_input_ids) > 50
    assert m["host_hit_tokens"] > 30  # most of B came back from the host pool
    assert m["prefilled_tokens"] == len(warm.origin_input_ids) - m["matched_tokens"] == 1
    assert sched.tree_cache.counts().loaded_back >= m["host_hit_tokens"]
    # a cold run on a fresh pool (nothing cached): the oracle for the text and the logits
    cold, oracle = _run(_engine(smol, 2.0), "cold", warm.origin_input_ids)
    assert cold.metrics["matched_tokens"] == 0
    assert warm.output_ids == cold.output_ids == first.output_ids
    assert torch.allclose(warm_logits, oracle, atol=TOL, rtol=0)


def test_the_engine_splits_hits_as_the_model_replays_them(served):
    sched, runs = served
    reqs = [r for r, _ in runs]
    run, split = _replay(reqs, 2.0)
    got = [(r.metrics["device_hit_tokens"], r.metrics["host_hit_tokens"],
            r.metrics["prefilled_tokens"]) for r in reqs]
    assert got == [tuple(s) for s in split]
    assert sum(g[1] for g in got) == run.host_hit > 0
    assert sum(g[0] for g in got) == run.device_hit > 0
    counts = sched.tree_cache.counts()
    assert (counts.loaded_back, counts.demoted) == (run.loaded_back, run.demoted)
    sched.tree_cache.check_invariants()


def test_a_full_host_evicts_and_the_engine_still_agrees_with_the_model(smol):
    """Host ratio 0.5: 61 host tokens hold about one prompt; backing up the next evicts it."""
    prompts = [_prompt(smol, t) for t in TOPICS]
    sched = _engine(smol, 0.5)
    reqs = [_run(sched, rid, p, new=2)[0] for rid, p in zip("abcd", prompts)]
    reqs += [_run(sched, rid, prompts[i], new=2)[0] for rid, i in (("b2", 1), ("a2", 0))]
    counts = sched.tree_cache.counts()
    assert counts.host_evicted > 0
    assert sched.tree_cache.host.num_used <= sched.tree_cache.host.capacity
    run, split = _replay(reqs, 0.5)
    assert [(r.metrics["device_hit_tokens"], r.metrics["host_hit_tokens"],
             r.metrics["prefilled_tokens"]) for r in reqs] == [tuple(s) for s in split]
    assert (counts.loaded_back, counts.demoted) == (run.loaded_back, run.demoted)


def test_write_back_copies_at_demotion_and_loads_the_same_rows(smol):
    """Write-back backs a node up only when it is evicted: the rows must still be right."""
    a, b, c = (_prompt(smol, t) for t in TOPICS[:3])
    sched = _engine(smol, 2.0, "write_back")
    _run(sched, "a", a)
    cold = _run(sched, "b", b)[0]
    assert sched.tree_cache.counts().backed_up == 0
    _run(sched, "c", c)
    warm = _run(sched, "b2", b)[0]
    assert warm.metrics["host_hit_tokens"] > 30
    assert warm.output_ids == cold.output_ids


def test_the_service_runs_the_host_tier_and_reports_the_split(smol):
    from engine.service import EngineService

    a, b, c = (_prompt(smol, t) for t in TOPICS[:3])
    with EngineService(smol, POOL, host_ratio=2.0) as service:
        results = [service.submit(p, 3, rid=rid).result(timeout=120)
                   for rid, p in (("a", a), ("b", b), ("c", c), ("b2", b))]
        assert service.reset_prefix_cache()
        assert service.tree.host.num_used == 0 == service.pool.num_used
    assert results[3].metrics["host_hit_tokens"] > 30
    assert results[3].output_ids == results[1].output_ids
    with pytest.raises(ValueError, match="host-ratio"):
        EngineService(smol, POOL, host_ratio=2.0, no_cache=True)


def test_serve_takes_the_host_options_and_gives_them_to_every_replica():
    from engine.__main__ import build_parser
    from engine.cluster import Cluster, ClusterConfig

    args = build_parser().parse_args(["serve", "--host-ratio", "4", "--write-policy",
                                      "write_back"])
    assert (args.host_ratio, args.write_policy) == (4.0, "write_back")
    assert build_parser().parse_args(["serve"]).host_ratio is None
    made = []

    class Replica:
        def __init__(self, loaded, capacity, **kw):
            made.append(kw)

        def close(self, *a, **kw):
            pass

    config = ClusterConfig(dp=2, router="round-robin", kv_endpoint=None,
                           kv_replay_endpoint=None, host_ratio=4.0, write_policy="write_back")
    Cluster(None, config, service_factory=Replica).close()
    assert [(kw["host_ratio"], kw["write_policy"]) for kw in made] == [(4.0, "write_back")] * 2
    made.clear()
    Cluster(None, ClusterConfig(dp=1, router="round-robin", kv_endpoint=None,
                                kv_replay_endpoint=None), service_factory=Replica).close()
    assert "host_ratio" not in made[0]  # off: the factory's own defaults


def test_a_backend_whose_rows_live_elsewhere_is_refused_and_the_simulated_one_runs(smol):
    """A process backend keeps the KV rows in its child: the host tier could not copy them,
    so the service refuses it (and closes the backend); the simulated backend has no rows and
    runs the same tier logic."""
    from engine.backends import simulated
    from engine.service import EngineService
    from radix.request import SlotAllocator

    closed = []

    class RowsElsewhere:
        def __init__(self, loaded, capacity, page_size=1):
            self.pool, self.runner = SlotAllocator(capacity), None

        def close(self):
            closed.append(True)

    with pytest.raises(ValueError, match="needs the model's own KVPool"):
        EngineService(smol, POOL, host_ratio=2.0, backend=RowsElsewhere)
    assert closed == [True]
    a = _prompt(smol, TOPICS[0])
    with EngineService(smol, POOL, host_ratio=2.0, backend=simulated()) as service:
        first = service.submit(a, 3, rid="a").result(timeout=60)
        again = service.submit(a, 3, rid="a2").result(timeout=60)
    assert first.metrics["matched_tokens"] == 0
    assert again.metrics["device_hit_tokens"] == len(a) - 1
