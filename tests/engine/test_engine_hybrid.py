"""Gemma 3 text on the engine: five sliding-window layers to one full, against transformers.

The model is examples/configs/tiny_gemma3.json with random weights (6 layers, window 8: a query
sees itself and the 7 positions before it, so SGLang's sliding_window_size is 7) and random norm
weights too (Gemma's init leaves them 0, and it scales by 1 + w). The oracles are transformers'
own forward (last-token logits within 1e-4) and generate (greedy tokens, equal), cold, with a
prefix read from the pool, in ragged batched decode while the window frees SWA rows (every freed
row counted: n new tokens free n - 2 - 7 past the prompt), and through EngineService and
UnifiedEngine, whose component tree (UnifiedRadixCache, FULL + SWA) hits where the window lives.
"""

from __future__ import annotations

import json
from functools import partial

import pytest

from radix.request import Req
from radix.tree.components.base import FULL, SWA
from radix.tree.components.swa import free_swa_out_of_window_slots
from radix.tree.unified_radix_cache import UnifiedRadixCache

torch = load_model = KVPool = SWAKVPool = ModelRunner = plan_spans = check_supported = None
ModelBackend = EngineService = UnifiedEngine = SchedulerKnobs = None

pytestmark = pytest.mark.engine
TINY = "examples/configs/tiny_gemma3.json"
TOL = 1e-4
W = 7  # SGLang's sliding_window_size: the config's sliding_window (8) - 1


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, load_model, KVPool, SWAKVPool, ModelRunner, plan_spans
    global check_supported, ModelBackend, EngineService, UnifiedEngine, SchedulerKnobs
    import torch

    from engine.attention import plan_spans
    from engine.backends import ModelBackend
    from engine.kv_pool import KVPool
    from engine.model import check_supported, load_model
    from engine.runner import ModelRunner
    from engine.service import EngineService
    from engine.swa_pool import SWAKVPool
    from engine.unified_engine import UnifiedEngine
    from radix.tree.hybrid_lifecycle import SchedulerKnobs


@pytest.fixture(scope="module")
def gemma():
    loaded = load_model(random_init=TINY, device="cpu")
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in loaded.model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return loaded


class _WindowRunner:
    """The model's runner, and before each decode step each request's SWA rows out of its
    window freed by radix's free_swa_out_of_window_slots (what the scheduler's decode does over
    the component tree, at interval 1); `num_freed` counts them."""

    def __init__(self, gemma, pool) -> None:
        self.runner, self.pool = ModelRunner(gemma.model, pool), pool
        self.window = UnifiedRadixCache((FULL, SWA), sliding_window_size=W,
                                        allocator=pool.allocator)
        self.num_freed = 0

    @property
    def last_logits(self):
        return self.runner.last_logits

    def extend(self, reqs, prefix_lens):
        return self.runner.extend(reqs, prefix_lens)

    def decode(self, reqs):
        for req in reqs:
            state = self.window.kv_of(req)
            before = max(state.swa_evicted_seqlen, req.cache_protected_len)
            free_swa_out_of_window_slots(self.window, req, state, len(req.all_ids) - 1)
            self.num_freed += max(state.swa_evicted_seqlen - before, 0)
        return self.runner.decode(reqs)


def _window_runner(gemma, size: int = 256):
    pool = SWAKVPool.for_model(gemma.model.config, size, torch.float32, "cpu")
    return _WindowRunner(gemma, pool), pool


def _hf_logits(gemma, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return gemma.model(torch.tensor([ids])).logits[0, -1].float()


_GENERATED: dict[tuple, list[int]] = {}  # (prompt, n) -> generate's tokens, for this module


def _hf_generate(gemma, ids: list[int], n: int) -> list[int]:
    key = (tuple(ids), n)
    if key not in _GENERATED:
        x = torch.tensor([ids])
        with torch.inference_mode():
            out = gemma.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                                       do_sample=False, pad_token_id=0)
        _GENERATED[key] = out[0, len(ids):].tolist()
    return _GENERATED[key]


def _prefill(runner, pool, ids: list[int], prefix_slots: list[int], n: int) -> Req:
    """As the scheduler does: slots for the suffix, extend, then the tree owns the prompt."""
    req = Req(f"r{len(ids)}-{len(prefix_slots)}", list(ids), max_new_tokens=n)
    req.fill_ids = list(ids)
    req.slot_ids = list(prefix_slots) + pool.alloc(len(ids) - len(prefix_slots))
    out = runner.extend([req], [len(prefix_slots)])
    req.cache_protected_len = len(ids)  # cache_unfinished_req: the window never frees it
    req.output_ids.append(out.next_token_ids[0])
    return req


def _decode_all(runner, pool, reqs: list[Req]) -> list[list[torch.Tensor]]:
    """Batched decode until every request is done; each request's logits per step."""
    logits = [[runner.last_logits[i].clone()] for i in range(len(reqs))]
    while not all(r.finished for r in reqs):
        live = [r for r in reqs if not r.finished]
        for r in live:
            r.slot_ids += pool.alloc(1)
        out = runner.decode(live)
        for i, (r, tok) in enumerate(zip(live, out.next_token_ids)):
            logits[reqs.index(r)].append(runner.last_logits[i].clone())
            r.output_ids.append(tok)
    return logits


def test_cold_then_warm_prefix_equal_transformers_while_the_window_frees(gemma):
    """A 40-token prompt, 12 new tokens: prefill logits equal transformers' forward, the greedy
    tokens its generate. Run again on 24 of those prompt slots (read from both pools): every
    step's logits equal the cold run's. Each run's decode frees 12 - 2 - 7 = 3 SWA rows, and
    no sliding layer ever reads a freed one (the runner raises if it does)."""
    runner, pool = _window_runner(gemma)
    ids = [(i * 7919) % 40000 + 100 for i in range(40)]
    cold = _prefill(runner, pool, ids, [], 12)
    assert (runner.last_logits[0] - _hf_logits(gemma, ids)).abs().max() < TOL
    cold_logits = _decode_all(runner, pool, [cold])[0]
    assert cold.output_ids == _hf_generate(gemma, ids, 12)
    assert runner.num_freed == 3 and pool.translate(cold.slot_ids[40:43]) == [0, 0, 0]
    warm = _prefill(runner, pool, ids, cold.slot_ids[:24], 12)
    warm_logits = _decode_all(runner, pool, [warm])[0]
    assert warm.output_ids == cold.output_ids and runner.num_freed == 6
    assert max((a - b).abs().max() for a, b in zip(cold_logits, warm_logits)) < TOL
    pool.check_invariants()


def test_ragged_batched_decode_with_a_shared_prefix_equals_transformers(gemma):
    """Two requests share 20 prompt slots (as the tree hands them out: a cascade group on the
    full layer), a third shares none; prompts of 26, 31 and 13 tokens decode 10 steps together,
    each step's logits equal to transformers' forward of that request's tokens so far. Step k
    computes position P + k - 1, so steps 9 and 10 each free one SWA row per request."""
    runner, pool = _window_runner(gemma)
    shared = list(range(300, 320))
    first = _prefill(runner, pool, shared + list(range(50, 56)), [], 11)
    reqs = [first, _prefill(runner, pool, shared + list(range(60, 71)), first.slot_ids[:20], 11),
            _prefill(runner, pool, list(range(900, 913)), [], 11)]
    for _ in range(10):
        for r in reqs:
            r.slot_ids += pool.alloc(1)
        out = runner.decode(reqs)
        for i, r in enumerate(reqs):
            assert (runner.last_logits[i] - _hf_logits(gemma, list(r.all_ids))).abs().max() < TOL
            r.output_ids.append(out.next_token_ids[i])
    assert runner.num_freed == 3 * 2


def test_one_pool_masked_to_the_window_equals_transformers(gemma):
    """Without an SWA pool (page > 1, the model's own process) the sliding layers read the full
    layers' rows, masked to the window: the same tokens as generate."""
    pool = KVPool.for_model(gemma.model.config, 128, torch.float32, "cpu")
    runner = ModelRunner(gemma.model, pool)
    ids = list(range(1000, 1030))
    req = _prefill(runner, pool, ids, [], 6)
    _decode_all(runner, pool, [req])
    assert req.output_ids == _hf_generate(gemma, ids, 6)


def test_a_sliding_layer_reading_a_freed_row_raises(gemma):
    runner, pool = _window_runner(gemma)
    req = _prefill(runner, pool, list(range(500, 520)), [], 4)
    pool.free_swa(req.slot_ids[15:16])  # position 15: inside the next query's window (13..20)
    req.slot_ids += pool.alloc(1)
    with pytest.raises(RuntimeError, match="SWA row that was freed"):
        runner.decode([req])


A = [(i * 104729) % 45000 + 10 for i in range(30)]  # the first request's prompt


def _turns(gemma, run) -> list[Req]:
    """A alone; then B24 and B29 together (A's first 24 / 29 tokens and 8 more); then C (A's
    prompt and output and 5 more), 16 new tokens each, each turn through `run(reqs) ->
    finished reqs`; each output checked against generate."""
    a = run([Req("A", A, max_new_tokens=16)])[0]
    tail = list(range(40, 48))
    bs = run([Req("B24", A[:24] + tail, max_new_tokens=16),
              Req("B29", A[:29] + tail, max_new_tokens=16)])
    c = run([Req("C", A + a.output_ids + list(range(70, 75)), max_new_tokens=16)])
    done = sorted([a, *bs, *c], key=lambda r: r.rid)
    for r in done:
        assert r.output_ids == _hf_generate(gemma, list(r.origin_input_ids), 16), r.rid
    return done


def test_service_on_the_component_tree_hits_where_the_window_lives(gemma):
    """EngineService runs the model on SGLang's component tree (UnifiedRadixCache, FULL + SWA,
    window 7, SWA freed every token); outputs equal generate. A's checkpoint after its prefill
    frees SWA rows 0..21 (positions past 29 - 7), so A's prompt is a tombstone [0, 22) and a
    live [22, 30). B24 matches 24 FULL tokens but only 2 live ones behind them: hit 0. B29 has
    7 live ones: hit 29. C walks A's prompt and output (tombstone [30, 37) freed by A's decode,
    live [37, 45)): hit 45, where a FULL-only tree holding only live rows would stop at A's
    prompt, 30. Rows freed as the window passed: A 22 + 7, B24 24 + 7, B29 0 + 7 (its match
    covers its window), C 0 + 7: 74; none tombstoned."""
    svc = EngineService(gemma, 300, backend=partial(ModelBackend, swa_eviction_interval=1))

    def run(reqs: list[Req]) -> list[Req]:
        handles = [svc.submit(list(r.origin_input_ids), r.max_new_tokens, rid=r.rid)
                   for r in reqs]
        return [Req(h.rid, r.origin_input_ids, list(res.output_ids), r.max_new_tokens,
                    metrics=dict(res.metrics))
                for h, r, res in zip(handles, reqs, [h.result() for h in handles])]

    with svc:
        done = _turns(gemma, run)
        pool, tree, counts = svc.pool, svc.tree, svc.backend.swa_counts
        svc.call(pool.allocator.check_invariants)
        svc.call(tree.check_invariants)
        assert pool.full_available_size() == 300 - tree.total_size()
        assert pool.allocator.swa.num_used == tree.component_evictable_size(SWA)
    assert [r.metrics["matched_tokens"] for r in done] == [0, 0, 29, 45]
    assert counts.window_freed == 74 and counts.tombstoned == 0


def test_component_tree_under_swa_pressure_still_equals_transformers(gemma):
    """UnifiedEngine (the scheduler over the component tree, in this thread) with 45 SWA rows
    for 300 full ones and chunked prefill of 16: allocations tombstone cached SWA (the tree's
    LRU), admission holds each request to SGLang's SWA estimate, and every output still equals
    generate (the hits drop: a match needs a live window)."""
    engine = UnifiedEngine(gemma, 300, swa_ratio=0.15, chunked_prefill_size=16,
                           knobs=SchedulerKnobs(enable_overlap_schedule=False,
                                                swa_eviction_interval=1))
    _turns(gemma, engine.run)
    assert engine.counts.tombstoned > 0
    engine.allocator.check_invariants()
    engine.cache.check_invariants()


def test_windowed_plan_masks_keys_past_the_window():
    """Five new tokens from position 0, window 3: each sees itself and the two before it."""
    plan = plan_spans([[1, 2, 3, 4, 5]], [0], "cpu", padded=True, window=3)
    assert plan.buckets[0].mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    with pytest.raises(ValueError, match="start inside"):
        plan_spans([list(range(1, 9))], [5], "cpu", window=3)  # keys 0..2 are out of its window


def test_gemma3_features_the_runner_lacks_are_refused(tmp_path):
    from transformers import AutoConfig

    fields = json.loads(open(TINY).read())
    for extra in ({"attn_logit_softcapping": 50.0}, {"use_bidirectional_attention": True}):
        with pytest.raises(ValueError, match=next(iter(extra))):
            check_supported(AutoConfig.for_model(**fields, **extra))
