"""Model presets from real Hugging Face configs, for both caches (pure Python, no torch).

`load_preset(name_or_path)` reads a shipped preset (PRESETS) or any config.json into a
`ModelPreset`: the kind of every layer, heads, window, recurrent-state shapes and the bytes they
imply. `vllm_layout(preset, VllmOptions())` is what vLLM 0.33 on an H100 builds from it: the
attention block (raised to hold a Mamba page), the KV-cache groups, the hash and scheduler blocks.
radix/models/engines.py maps a preset onto both engines under the assumptions that change the
answer (`EngineAssumptions`, `for_sglang`, `for_vllm`): what the commands' `--model` runs.
"""

from radix.models.config import PRESETS, load_preset, preset_from_config
from radix.models.preset import LAYER_KINDS, ConfigError, ModelPreset
from radix.models.vllm import VllmLayout, VllmOptions, vllm_layout

__all__ = ["ModelPreset", "ConfigError", "LAYER_KINDS", "PRESETS", "load_preset",
           "preset_from_config", "VllmOptions", "VllmLayout", "vllm_layout"]
