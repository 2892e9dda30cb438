"""The engine end to end on the real default model: scheduler loop, radix tree, KV pool, model.

The three-request walk of DESIGN.md through real prefill, a pool too small for its load
(retraction, then the same greedy text as a roomy run), and callers on several threads.
"""

from __future__ import annotations

import threading

import pytest
from machine import seconds

from examples.workloads import three_requests
from radix.request import Req
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.tree.radix_cache import RadixCache

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
KVPool = ModelRunner = EngineService = fit_to_vocab = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global KVPool, ModelRunner, EngineService, fit_to_vocab
    from engine.kv_pool import KVPool
    from engine.runner import ModelRunner
    from engine.service import EngineService, fit_to_vocab


pytestmark = pytest.mark.engine


def _check(service: EngineService) -> None:
    def check():
        service.tree.check_invariants()
        service.pool.check_invariants()
        service.shadow.manager.check_invariants()
        return service.pool.num_used, service.tree.total_size()
    used, cached = service.call(check)
    assert used == cached, "with nothing running, every used slot belongs to the tree"


def test_three_request_walk_matches_2055_then_512(smol):
    """R1 = S+F+96 (2,151), R2 = S+F+80 (2,135), R3 = S+2,112 (2,624), one after another.

    R2 matches S+F = 512 + 1,543 = 2,055 and prefills 80; R3 matches S = 512 and prefills 2,112.
    Each request decodes 2 tokens, so the tree keeps prompt + 1 token each (the last token's KV
    is never computed): 4,343 + 3 = 4,346. vLLM's 16-token blocks hit 2,048 and 512.
    """
    trace = three_requests(seed=0)
    prompts = fit_to_vocab(trace, smol.model.config.vocab_size)
    with EngineService(smol, capacity_tokens=8_000) as service:
        results = [service.submit(p, 2, rid=t.rid).result(timeout=seconds(300))
                   for t, p in zip(trace, prompts)]
        _check(service)
        assert service.call(service.tree.total_size) == 4_346
    m1, m2, m3 = (r.metrics for r in results)
    assert (m1["matched_tokens"], m1["prefilled_tokens"]) == (0, 2_151)
    assert (m2["matched_tokens"], m2["prefilled_tokens"]) == (2_055, 80)
    assert (m3["matched_tokens"], m3["prefilled_tokens"]) == (512, 2_112)
    assert (m2["block_matched_tokens"], m3["block_matched_tokens"]) == (2_048, 512)
    assert m2["ttft"] < m1["ttft"] / 2, "a 2,055-token hit must make R2's first token faster"
    assert all(len(r.output_ids) == 2 for r in results)


def _texts(smol, n: int) -> list[list[int]]:
    """n prompts of 48 tokens: 32 shared, 16 of each one's own."""
    shared = smol.tokenizer("Facts about rivers, mountains and the cities built beside "
                            "them, told plainly and briefly for a school atlas. " * 3)["input_ids"]
    own = [smol.tokenizer(f" Question {i}: which river flows through city number {i} "
                          "and where does it reach the sea?")["input_ids"] for i in range(n)]
    return [shared[:32] + o[:16] for o in own]


def _run(smol, prompts: list[list[int]], capacity: int, disable: bool,
         max_new: list[int] | None = None) -> Scheduler:
    pool = KVPool.for_model(smol.model.config, capacity, smol.dtype, "cpu")
    tree = RadixCache(allocator=pool, disable=disable)
    sched = Scheduler(ModelRunner(smol.model, pool), tree, pool)
    for i, p in enumerate(prompts):
        sched.add_request(Req(f"r{i}", p, max_new_tokens=32 if max_new is None else max_new[i]))
    while sched.has_work:
        sched.step()
        tree.check_invariants()
        pool.check_invariants()
        locked = sum(len(r.slot_ids) - r.cache_protected_len for r in sched.running)
        assert pool.num_used == tree.total_size() + locked
    return sched


def test_pool_too_small_retracts_and_still_gives_the_roomy_text(smol):
    """5 requests of 48 prompt tokens (32 shared) wanting 32, 32, 4, 32, 32 outputs in a
    160-slot pool: admission stops for memory (batch_is_full); the 4-output request's finish
    clears the flag and admission resumes on SGLang's estimate (0.7 x the outputs the running
    requests may still make), which over-admits: decode runs out, one request is retracted and
    re-prefilled later. The text must equal a 4,096-slot run's."""
    prompts, max_new = _texts(smol, 5), [32, 32, 4, 32, 32]
    small = _run(smol, prompts, capacity=160, disable=False, max_new=max_new)
    roomy = _run(smol, prompts, capacity=4_096, disable=True, max_new=max_new)
    assert small.num_retracted >= 1 and roomy.num_retracted == 0
    by_rid = {r.rid: r.output_ids for r in roomy.finished}
    assert len(small.finished) == 5
    for req in small.finished:
        assert len(req.output_ids) == req.max_new_tokens and req.output_ids == by_rid[req.rid]


def test_concurrent_callers_all_complete_with_their_metrics(smol):
    """4 threads x 2 requests each, sharing a 32-token start. A thread's second request comes
    after its first finished, so it matches at least those 32 tokens."""
    prompts = _texts(smol, 8)
    reference = {r.rid: r.output_ids for r in _run(smol, prompts, 4_096, True).finished}
    results, streams, lock = {}, {}, threading.Lock()
    with EngineService(smol, capacity_tokens=4_096) as service:
        def caller(t: int) -> None:
            for k in (0, 1):
                rid = f"r{2 * t + k}"
                handle = service.submit(prompts[2 * t + k], 12, rid=rid)
                tokens = list(handle.tokens(timeout=seconds(120)))
                with lock:
                    streams[rid], results[rid] = tokens, handle.result(timeout=seconds(1))
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=seconds(300))
        _check(service)
        stamped = list(service.events)
    assert sorted(results) == [f"r{i}" for i in range(8)]
    for rid, res in results.items():
        m = res.metrics
        assert streams[rid] == res.output_ids == reference[rid][:12]
        assert m["matched_tokens"] + m["prefilled_tokens"] == 48
        assert m["ttft"] > 0 and m["decode_tps"] > 0 and m["output_tokens"] == 12
        if rid in ("r1", "r3", "r5", "r7"):
            assert m["matched_tokens"] >= 32
    tree_rids = {e.rid for e in stamped if e.source == "tree"}
    assert set(results) <= tree_rids
    assert all(e.wall_time > 0 for e in stamped)


def test_shared_weights_are_one_buffer_the_child_model_reads_as_the_parent(smol):
    """What a model process receives (engine/remote.py's SharedWeights): one shared buffer per
    dtype (one file descriptor, not one per tensor), the parent's own tensors repacked into it
    once, and a model built from it whose every tensor reads those same bytes, tied weights
    still one tensor, and whose logits equal the parent's."""
    import torch

    from engine.remote import SharedWeights

    model = smol.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    shared = SharedWeights.of(model)
    assert SharedWeights.of(model) is shared and len(shared.flats) <= 2
    assert all(f.is_shared() for f in shared.flats.values())
    child = shared.build()
    spans = [(f.data_ptr(), f.data_ptr() + f.numel() * f.element_size())
             for f in shared.flats.values()]
    for mine in (model, child):
        state = mine.state_dict()
        assert state.keys() == before.keys()
        for name, t in state.items():
            assert torch.equal(t, before[name]), name
            assert any(lo <= t.data_ptr() < hi for lo, hi in spans), name
    assert child.lm_head.weight is child.model.embed_tokens.weight
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        assert torch.equal(child(ids).logits, model(ids).logits)


def test_submit_after_close_raises_instead_of_hanging(smol):
    service = EngineService(smol, 256)
    service.close()
    with pytest.raises(RuntimeError, match="closed"):
        service.submit([1, 2, 3], max_new_tokens=1)


def _first_logits_and_text(smol, prompts, **kw):
    """Runs prompts one after another; returns each one's first-token logits and greedy ids."""
    pool = KVPool.for_model(smol.model.config, 2_048, smol.dtype, "cpu")
    tree = RadixCache(page_size=kw.pop("page_size", 1), allocator=pool,
                      disable=kw.pop("disable", False))
    runner = ModelRunner(smol.model, pool)
    sched = Scheduler(runner, tree, pool, SchedulerConfig(**kw))
    out = []
    for i, p in enumerate(prompts):
        req, logits = Req(f"r{i}", p, max_new_tokens=6), None
        sched.add_request(req)
        while sched.has_work:
            report = sched.step()
            if report.kind == "prefill" and logits is None and req.output_ids:
                logits = runner.last_logits[report.rids.index(req.rid)].clone()
        tree.check_invariants()
        out.append((logits, req.output_ids, req.metrics["matched_tokens"], req.metrics))
    return out


def test_chunked_and_paged_prefill_give_the_unchunked_cold_text_and_logits(smol):
    """Two 271-token prompts sharing 265 + 2 tokens (" Question:"). Chunks of 64 (271 = 64 x 4 +
    15): the second matches 267; a page size of 16: 256 = 16 x 16. Each must give the cold,
    unchunked run's greedy tokens and first-token logits within 1e-4 (fp32)."""
    base = smol.tokenizer("The river valley grew wheat, barley and lentils. " * 30)["input_ids"]
    prompts = [base[:265] + smol.tokenizer(q)["input_ids"][:6]
               for q in (" Question: what grew there?", " Question: who lived there?")]
    cold = _first_logits_and_text(smol, prompts, disable=True)
    assert len(base) >= 265
    for kw, matched in (({"chunked_prefill_size": 64}, 267), ({"page_size": 16}, 256),
                        ({"chunked_prefill_size": 64, "page_size": 16}, 256)):
        warm = _first_logits_and_text(smol, prompts, **kw)
        for (lc, tc, _, _), (lw, tw, _, _) in zip(cold, warm):
            assert tw == tc and (lw - lc).abs().max().item() < 1e-4, kw
        assert warm[1][2] == matched, kw
