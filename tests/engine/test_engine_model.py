"""Model loading: devices, the converted-GGUF cache folder, --model checkpoints, --random-init.

A local checkpoint is made on the spot (tiny random Llama saved with save_pretrained, with the
default model's tokenizer), so `--model PATH` is exercised without any download.
"""

from __future__ import annotations

import json

import pytest

from radix.request import Req

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
torch = KVPool = DEFAULT_NAME = cache_root = load_model = resolve_device = ModelRunner = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, KVPool, DEFAULT_NAME, cache_root, load_model, resolve_device, ModelRunner
    import torch

    from engine.kv_pool import KVPool
    from engine.model import DEFAULT_NAME, cache_root, load_model, resolve_device
    from engine.runner import ModelRunner


pytestmark = pytest.mark.engine
TINY = "examples/configs/tiny_llama.json"


def test_resolve_device():
    assert resolve_device("cpu") == (torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == (torch.device("cpu"), torch.float32)
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


def test_default_model_is_kept_as_a_plain_checkpoint(smol):
    """After a load, the cache folder holds fp32 safetensors, a GGUF-free config, the tokenizer
    with its chat template; a reload comes from there."""
    assert smol.source in ("gguf", "cache")  # the session's load converts on a first run
    loaded = load_model(device="cpu")
    assert loaded.source == "cache" and loaded.name == DEFAULT_NAME
    folder = cache_root() / DEFAULT_NAME
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert loaded.tokenizer.chat_template and "<|im_start|>" in loaded.tokenizer.chat_template
    head, embed = loaded.model.lm_head.weight, loaded.model.model.embed_tokens.weight
    assert head.data_ptr() == embed.data_ptr(), "the tied lm_head must come back tied"


def test_local_checkpoint_runs_through_the_runner(tmp_path):
    random = load_model(random_init=TINY, device="cpu")
    assert random.meaningless_text and random.source == "random"
    random.model.save_pretrained(tmp_path)
    random.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(model=str(tmp_path), device="cpu")
    assert loaded.source == "checkpoint" and loaded.name == tmp_path.name
    ids = loaded.tokenizer("A checkpoint loaded from a local folder.")["input_ids"]
    pool = KVPool.for_model(loaded.model.config, 64, torch.float32, "cpu")
    req = Req("r", ids)
    req.fill_ids, req.slot_ids = list(ids), pool.alloc(len(ids))
    runner = ModelRunner(loaded.model, pool)
    runner.extend([req], [0])
    with torch.inference_mode():
        expected = loaded.model(torch.tensor([ids])).logits[0, -1]
    assert (runner.last_logits[0] - expected).abs().max() < 1e-4


def test_bad_sources_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a folder with a config.json"):
        load_model(model=str(tmp_path), device="cpu")
    with pytest.raises(ValueError, match="exclude each other"):
        load_model(model=str(tmp_path), random_init=TINY)
    small = json.loads(open(TINY).read()) | {"vocab_size": 1000}
    (tmp_path / "small.json").write_text(json.dumps(small))
    with pytest.raises(ValueError, match="field 'vocab_size'"):
        load_model(random_init=str(tmp_path / "small.json"), device="cpu")
    (tmp_path / "gpt2.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="'gpt2' is not supported"):
        load_model(random_init=str(tmp_path / "gpt2.json"), device="cpu")
