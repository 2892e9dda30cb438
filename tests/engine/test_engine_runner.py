"""The KV pool and the model runner on the real default model (SmolLM2-135M, CPU fp32).

The oracle is transformers' own forward of the whole sequence: the runner's pool-backed
attention must give the same last-token logits (within 1e-4) cold, warm (prefix KV reused from
pool slots) and in a ragged decode batch.
"""

from __future__ import annotations

import pytest

from radix.request import Req

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
torch = plan_spans = KVPool = parse_capacity = ModelRunner = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, plan_spans, KVPool, parse_capacity, ModelRunner
    import torch

    from engine.attention import plan_spans
    from engine.kv_pool import KVPool, parse_capacity
    from engine.runner import ModelRunner


pytestmark = pytest.mark.engine
TOL = 1e-4


@pytest.fixture
def runner(smol):
    return ModelRunner(smol.model, KVPool.for_model(smol.model.config, 2048, smol.dtype, "cpu"))


def _prompt(smol, question: str) -> list[int]:
    messages = [{"role": "system", "content": "You answer questions about geography briefly."},
                {"role": "user", "content": question}]
    return smol.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=True, return_dict=True)["input_ids"]


def _prefill(runner: ModelRunner, ids: list[int], prefix_slots: list[int]) -> Req:
    req = Req("r", list(ids), max_new_tokens=8)
    req.fill_ids = list(ids)
    req.slot_ids = list(prefix_slots) + runner.pool.alloc(len(ids) - len(prefix_slots))
    out = runner.extend([req], [len(prefix_slots)])
    req.output_ids.append(out.next_token_ids[0])
    return req


def _greedy(runner: ModelRunner, req: Req) -> list[torch.Tensor]:
    logits = [runner.last_logits[0].clone()]
    while not req.finished:
        req.slot_ids += runner.pool.alloc(1)
        out = runner.decode([req])
        req.output_ids.append(out.next_token_ids[0])
        logits.append(runner.last_logits[0].clone())
    return logits


def _hf_last_logits(smol, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return smol.model(torch.tensor([ids])).logits[0, -1].float()


def test_bytes_per_token_smollm2_fp32(smol):
    """30 layers x 3 KV heads x 64 dims x 2 (K, V) x 4 B = 46,080 B; 45 MiB holds 1,024 tokens."""
    assert KVPool.bytes_per_token_of(smol.model.config, torch.float32) == 46_080
    assert parse_capacity("45MiB", 46_080) == 1024
    pool = KVPool.for_model(smol.model.config, 8, torch.float32, "cpu")
    assert pool.bytes_per_token == 46_080 and pool.total_bytes == 8 * 46_080


def test_pool_alloc_free_segment_and_double_free():
    pool = KVPool(6, num_layers=1, num_kv_heads=1, head_dim=2)
    slots = pool.alloc(5)
    assert slots == [1, 2, 3, 4, 5] and pool.alloc(2) is None and pool.available_size() == 1
    pool.free_segment(slots, start_pos=3)  # frees 4, 5
    assert pool.available_size() == 3 and pool.num_used == 3
    with pytest.raises(ValueError, match="not in use"):
        pool.free([4])
    pool.check_invariants()
    with pytest.raises(ValueError, match="capacity"):
        parse_capacity("lots", 46_080)


def test_cold_prefill_matches_transformers_forward(smol, runner):
    ids = _prompt(smol, "What is the capital of France?")
    _prefill(runner, ids, [])
    assert (runner.last_logits[0] - _hf_last_logits(smol, ids)).abs().max() < TOL


def test_warm_prefix_gives_cold_logits_and_greedy_text(smol, runner):
    """Run A cold; run B = same prompt reusing A's first len(system part) slots from the pool."""
    ids = _prompt(smol, "Name three rivers in Africa.")
    cold = _prefill(runner, ids, [])
    cold_logits = _greedy(runner, cold)
    prefix = len(_prompt(smol, "")) - 6  # the system part and the user turn's header
    assert prefix > 10 and ids[:prefix] == _prompt(smol, "")[:prefix]
    warm = _prefill(runner, ids, cold.slot_ids[:prefix])
    warm_logits = _greedy(runner, warm)
    assert warm.output_ids == cold.output_ids
    for a, b in zip(cold_logits, warm_logits):
        assert (a - b).abs().max() < TOL
    text = smol.tokenizer.decode(warm.output_ids)
    assert text.strip(), "greedy decode produced no text"


def test_ragged_batched_decode_equals_single_decode(smol, runner):
    reqs = [_prefill(runner, _prompt(smol, q), []) for q in
            ("Capital of Peru?", "What is the longest river in the whole of Europe?")]
    for r in reqs:
        r.slot_ids += runner.pool.alloc(1)
    batched = runner.decode(reqs)
    both = runner.last_logits.clone()
    for i, r in enumerate(reqs):
        single = runner.decode([r])
        assert single.next_token_ids[0] == batched.next_token_ids[i]
        assert (runner.last_logits[0] - both[i]).abs().max() < TOL
        expected = _hf_last_logits(smol, r.all_ids)
        assert (both[i] - expected).abs().max() < TOL


def test_decode_without_a_slot_for_the_new_token_is_refused(smol, runner):
    req = _prefill(runner, _prompt(smol, "Hi"), [])
    with pytest.raises(ValueError, match="one slot per token"):
        runner.decode([req])


def test_cascade_decode_of_shared_slots_equals_per_request_decode(smol, runner):
    """Three requests reuse one cold run's system-prompt slots (as the radix tree hands them out),
    a fourth shares nothing. The batched step groups the three (cascade attention on the shared
    slots); each request's logits equal its own single-request decode and transformers' forward,
    and greedy continuations match token for token."""
    system = "You answer questions about geography briefly, naming rivers, peaks and capitals. "
    prompts = [smol.tokenizer.apply_chat_template(
        [{"role": "system", "content": system * 4}, {"role": "user", "content": q}],
        add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        for q in ("Capital of Chile?", "Longest river in Asia?", "Highest mountain in Africa?")]
    prefix = next(i for i, col in enumerate(zip(*prompts)) if len(set(col)) > 1)
    assert prefix > 60  # the system part: long enough to be worth a group (2 x 60 > GROUP_COST)
    first = _prefill(runner, prompts[0], [])
    reqs = [first] + [_prefill(runner, p, first.slot_ids[:prefix]) for p in prompts[1:]]
    reqs.append(_prefill(runner, smol.tokenizer("Rivers of the world:")["input_ids"], []))
    groups = plan_spans([r.slot_ids + [0] for r in reqs], [len(r.slot_ids) for r in reqs],
                        runner.device).groups
    assert [(m.tolist(), len(s)) for m, s in groups] == [([0, 1, 2], prefix)]
    for _ in range(3):
        for r in reqs:
            r.slot_ids += runner.pool.alloc(1)
        batched = runner.decode(reqs)
        both = runner.last_logits.clone()
        for i, r in enumerate(reqs):
            single = runner.decode([r])  # rewrites the same KV row with the same values
            assert single.next_token_ids[0] == batched.next_token_ids[i]
            assert (runner.last_logits[0] - both[i]).abs().max() < TOL
            assert (both[i] - _hf_last_logits(smol, r.all_ids)).abs().max() < TOL
            r.output_ids.append(batched.next_token_ids[i])
