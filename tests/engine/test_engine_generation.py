"""Generation as a server does it: EOS and stop strings end a request, sampling is seeded.

The oracle for greedy decoding is transformers' own `generate()` on the same weights: our
tokens must equal its tokens up to and including EOS, and stop there (the engine used to run
on past <|im_end|> into a made-up next turn). Stop-string and hold-back rules are checked on
plain strings first.
"""

from __future__ import annotations

import pytest
from machine import seconds

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
torch = GREEDY = SamplingParams = first_stop = held_back = sample = EngineService = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, GREEDY, SamplingParams, first_stop, held_back, sample, EngineService
    import torch

    from engine.sampling import GREEDY, SamplingParams, first_stop, held_back, sample
    from engine.service import EngineService


def test_first_stop_and_hold_back_known_answers():
    """"Hello wor" may be the start of "world": 3 characters ("wor") wait for more text."""
    assert first_stop("a.b.c", (".",)) == 1 and first_stop("abc", ("x", "c")) == 2
    assert held_back("Hello wor", ("world",)) == 3
    assert held_back("Hello world", ("world",)) == 0  # complete: first_stop cuts it instead
    assert held_back("ab\ufffd\ufffd", ()) == 2  # an unfinished UTF-8 character
    assert held_back("abc", ("cd", "bcx")) == 2  # the longest prefix that fits wins


def test_sampling_params_refuse_bad_values():
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -2},
                {"stop": ("",)}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def test_sample_top_k_and_top_p_keep_only_the_likely_tokens():
    """Logits [0, 3, 1, 2.9]: probabilities 0.024, 0.479, 0.065, 0.433 (e^x / 41.98).
    top_k=2 keeps ids 1 and 3. top_p=0.5: id 1 alone holds 0.479 < 0.5, so id 3 is needed too
    (0.912); the mass before id 2 already reaches 0.5, so ids 2 and 0 are never drawn."""
    logits = torch.tensor([0.0, 3.0, 1.0, 2.9])
    g = torch.Generator().manual_seed(1)
    k2 = {sample(logits, SamplingParams(1.0, top_k=2), g) for _ in range(200)}
    p5 = {sample(logits, SamplingParams(1.0, top_p=0.5), g) for _ in range(200)}
    assert k2 == {1, 3} and p5 == {1, 3}
    assert sample(logits, GREEDY, None) == 1


PROMPTS = ["What is 2+2?", "Say hi.", "Name a colour.", "What is the capital of Italy?"]


@pytest.mark.engine
def test_greedy_equals_transformers_generate_up_to_eos_then_stops(smol):
    """4 chat prompts, max 48 new tokens: each output equals generate()'s (which stops at EOS
    too) token for token, ends with EOS (finish_reason "stop") or is 48 long ("length")."""
    eos = smol.model.config.eos_token_id
    stopped = 0
    with EngineService(smol, 2_048) as service:
        for prompt in PROMPTS:
            ids = service.encode(prompt, chat=True)
            result = service.submit(ids, 48, sampling=SamplingParams()).result(timeout=seconds(120))
            ref = smol.model.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False,
                                      eos_token_id=eos, pad_token_id=eos)
            ref_ids = ref[0, len(ids):].tolist()
            assert result.output_ids == ref_ids, prompt
            if result.finish_reason == "stop":
                stopped += 1
                assert result.output_ids[-1] == eos and eos not in result.output_ids[:-1]
                assert "<|im_end|>" not in result.text
            else:
                assert result.finish_reason == "length" and len(result.output_ids) == 48
    assert stopped >= 3, "these short questions end with EOS well before 48 tokens"


@pytest.mark.engine
def test_stop_string_cuts_the_text_and_ends_the_request(smol):
    """Greedy counting runs ' four, five, six, ...'; stop=("six",) ends it once "six" is
    decoded: the text stops before it, finish_reason is "stop", fewer than 24 tokens ran."""
    with EngineService(smol, 2_048) as service:
        plain = service.submit("Count: one, two, three,", 24, sampling=SamplingParams()).result(60)
        cut = service.submit("Count: one, two, three,", 24,
                             sampling=SamplingParams(stop=("six",))).result(60)
    assert "six" in plain.text
    assert cut.finish_reason == "stop" and cut.text == plain.text[:plain.text.index("six")]
    assert len(cut.output_ids) < len(plain.output_ids)


@pytest.mark.engine
def test_seeded_sampling_repeats_and_differs_from_greedy(smol):
    """Two runs with seed 7 give the same tokens, even with another request beside one of them;
    top_k=1 is greedy whatever the temperature."""
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=7)
    with EngineService(smol, 2_048) as service:
        a = service.submit("Once upon a time", 12, sampling=params).result(60)
        other = service.submit("The weather today", 12, sampling=SamplingParams(1.0, seed=1))
        b = service.submit("Once upon a time", 12, sampling=params).result(60)
        other.result(60)
        greedy = service.submit("Once upon a time", 12, sampling=SamplingParams()).result(60)
        k1 = service.submit("Once upon a time", 12,
                            sampling=SamplingParams(temperature=2.0, top_k=1, seed=3)).result(60)
        c = service.submit("Once upon a time", 12,
                           sampling=SamplingParams(temperature=1.0, seed=8)).result(60)
    assert a.output_ids == b.output_ids
    assert k1.output_ids == greedy.output_ids
    assert c.output_ids != a.output_ids or a.output_ids != greedy.output_ids
