"""Model presets (radix/models/): the cache shape each shipped config.json implies, vLLM 0.33's
layout of it on an H100, and clear errors on a bad config. Arithmetic in each docstring.
"""

from __future__ import annotations

import json
import re

import pytest

from radix.models import ConfigError, VllmOptions, load_preset, vllm_layout


def test_bytes_per_token_and_per_state():
    """KV per token per layer = 2 x kv heads x head dim x 2 B (bf16). Qwen3.5-4B: 2x4x256x2 =
    4,096; GDN state = conv (2x16x128 + 32x128 = 8,192) x 3 x 2 B + SSM 32x128x128 x 4 B
    (mamba_ssm_dtype float32) = 49,152 + 2,097,152 = 2,146,304. Qwen3-Next keeps the SSM in
    bf16: 49,152 + 1,048,576 = 1,097,728. Nemotron-H-8B (Mamba-2): conv (128x64 + 2x8x128 =
    10,240) x 3 x 2 B + SSM 128x64x128 x 4 B (float32 default) = 61,440 + 4,194,304."""
    rows = {name: (p.num_layers_of("full_attention"), p.num_layers_of("sliding_attention"),
                   p.kv_bytes_per_token_per_layer, p.mamba_state_bytes_per_layer, p.sliding_window,
                   p.chunk_size)
            for name in ("qwen3.5-4b", "qwen3-next-80b-a3b", "gpt-oss-20b", "gemma-3-27b",
                         "nemotron-h-8b", "llama-3-8b")
            for p in [load_preset(name)]}
    assert rows == {
        "qwen3.5-4b": (8, 0, 4096, 2146304, None, 64),
        "qwen3-next-80b-a3b": (12, 0, 2048, 1097728, None, 64),
        "gpt-oss-20b": (12, 12, 2048, 0, 128, None),
        "gemma-3-27b": (10, 52, 8192, 0, 1024, None),
        "nemotron-h-8b": (4, 0, 4096, 4255744, None, 128),
        "llama-3-8b": (32, 0, 4096, 0, None, None)}
    assert load_preset("llama-3-8b").full_kv_bytes_per_token == 131072  # DESIGN.md's 128 KiB


def test_vllm_blocks_and_groups_on_an_h100():
    """The attention block holds one Mamba state: Qwen3.5-4B 64 x ceil(2,146,304 / (64 x 4,096))
    = 576 (FlashInfer GDN), 16 x ceil(2,146,304 / 65,536) = 528 (Triton); Qwen3-Next 576 / 544;
    Nemotron-H 16 x ceil(4,255,744 / 65,536) = 1,040. Groups: as many layers each as the
    smallest kind (Gemma 3: 52 sliding layers in 6 groups of <= 10, then the 10 full)."""
    def shape(name, **kw):
        layout = vllm_layout(load_preset(name), VllmOptions(**kw))
        return layout.block_size, [g.kv_cache_spec.kind[0] for g in layout.groups]

    assert shape("qwen3.5-4b") == (576, ["m", "m", "m", "f"])
    assert shape("qwen3.5-4b", gdn_prefill_backend="triton")[0] == 528
    assert shape("qwen3-next-80b-a3b", gdn_prefill_backend="triton")[0] == 544
    assert shape("nemotron-h-8b") == (1040, ["m"] * 6 + ["f"])
    assert shape("gpt-oss-20b") == (16, ["s", "f"])
    assert shape("gemma-3-27b") == (16, ["s"] * 6 + ["f"])
    assert shape("llama-3-8b") == (16, ["f"])
    fine = vllm_layout(load_preset("qwen3.5-4b"), VllmOptions(prefix_match_unit=64))
    assert (fine.hash_block_size, fine.scheduler_block_size, fine.checkpoint_alignment) == (
        64, 576, 64)


def test_a_config_path_works_where_a_preset_name_does(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_next", "num_hidden_layers": 8,
                                "num_attention_heads": 4, "num_key_value_heads": 2,
                                "head_dim": 64, "full_attention_interval": 4,
                                "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                "linear_key_head_dim": 32, "linear_value_head_dim": 32,
                                "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16"}))
    preset = load_preset(path)
    assert preset.layer_types.count("full_attention") == 2
    assert vllm_layout(preset).groups[0].kv_cache_spec.kind == "mamba"


@pytest.mark.parametrize("text, message", [
    ('{\n  "num_hidden_layers": 2,\n  "num_attention_heads": 4,\n  "hidden_size": oops\n}',
     "line 4"),
    ('{\n  "num_hidden_layers": 2,\n  "num_attention_heads": 0\n}',
     "field 'num_attention_heads' (line 3): expected an int >= 1"),
    ('{\n  "num_hidden_layers": 1,\n  "num_attention_heads": 4,\n  "head_dim": 8,\n'
     '  "layer_types": ["wavelet"]\n}', "field 'layer_types' (line 5): layer 0: unknown"),
    ('{\n  "num_hidden_layers": 1,\n  "num_attention_heads": 4,\n  "head_dim": 8,\n'
     '  "layer_types": ["linear_attention"]\n}', "field 'linear_num_key_heads': missing"),
])
def test_bad_configs_name_the_field_and_line(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_preset(path)


def test_an_unknown_name_says_what_it_accepts():
    with pytest.raises(ConfigError, match="neither a preset .*qwen3.5-4b"):
        load_preset("qwen9")
