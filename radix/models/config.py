"""config.json -> ModelPreset: the readers of each dialect (see radix/models/preset.py).

`load_preset` takes a preset name (the configs shipped in radix/models/data/, sources in
SOURCES.md there) or a path to any config.json; `preset_from_config` reads a parsed one. Every
error names the file, the field and, when the file has one per line, its line. Leaves out:
quantization, MoE and vision fields (no cache depends on them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from radix.models.preset import (
    DTYPE_BYTES,
    FULL,
    LINEAR,
    MAMBA,
    NONE,
    SLIDING,
    ConfigError,
    ModelPreset,
)

DATA = Path(__file__).resolve().parent / "data"
PRESETS = ("qwen3.5-4b", "qwen3-next-80b-a3b", "gpt-oss-20b", "gemma-3-27b", "nemotron-h-8b",
           "llama-3-8b")
_LAYER_NAMES = {"full_attention": FULL, "attention": FULL, "global": FULL,
                "sliding_attention": SLIDING, "sliding_window": SLIDING, "local": SLIDING,
                "linear_attention": LINEAR, "mamba": MAMBA, "mamba2": MAMBA,
                "mlp": NONE, "moe": NONE}
_PATTERN = {"M": MAMBA, "*": FULL, "-": NONE, "E": NONE}  # Nemotron-H's hybrid_override_pattern


def load_preset(name_or_path: str | Path) -> ModelPreset:
    """A preset by name (PRESETS) or a config.json by path.

    >>> load_preset("gpt-oss-20b").sliding_window
    128
    """
    text = str(name_or_path)
    path = DATA / f"{text}.json" if text in PRESETS else Path(text)
    if not path.is_file():
        raise ConfigError(f"{text}: neither a preset ({', '.join(PRESETS)}) nor a config.json "
                          "file")
    raw = path.read_text(encoding="utf-8")
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno} column {exc.colno}: not JSON: {exc.msg}"
                          ) from None
    source = (f"radix/models/data/{path.name} (sources: radix/models/data/SOURCES.md)"
              if text in PRESETS else str(path))
    return preset_from_config(config, text, source, _lines(raw))


def _lines(raw: str) -> dict[str, int]:
    """The line of each key's first appearance, to name it in errors."""
    lines: dict[str, int] = {}
    for number, line in enumerate(raw.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith('"') and '":' in stripped:
            lines.setdefault(stripped[1:stripped.index('"', 1)], number)
    return lines


class _Reader:
    """Fields of one (text) config, each error naming the file, the field and its line."""

    def __init__(self, config: dict, name: str, lines: dict[str, int]) -> None:
        self.config, self.name, self.lines = config, name, lines

    def fail(self, key: str, why: str) -> ConfigError:
        at = f" (line {self.lines[key]})" if key in self.lines else ""
        return ConfigError(f"{self.name}: field {key!r}{at}: {why}")

    def get(self, key: str, default: Any = None) -> Any:
        value = self.config.get(key)
        return default if value is None else value

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.config.get(key, default)
        if value is None:
            raise self.fail(key, "missing")
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.fail(key, f"expected an int >= {minimum}, got {value!r:.40}")
        return value

    def dtype(self, key: str, default: str) -> str:
        value = self.get(key, default)
        if value == "auto":
            return default
        if value not in DTYPE_BYTES:
            raise self.fail(key, f"unknown dtype {value!r:.40} (one of {sorted(DTYPE_BYTES)})")
        return value


def preset_from_config(config: Any, name: str, source: str = "",
                       lines: dict[str, int] | None = None) -> ModelPreset:
    """The preset of a parsed config.json (a nested text_config is read instead).

    >>> preset_from_config({"num_hidden_layers": 2, "num_attention_heads": 4,
    ...                     "hidden_size": 256}, "tiny").layer_types
    ('full_attention', 'full_attention')
    """
    if not isinstance(config, dict):
        raise ConfigError(f"{name}: expected a JSON object, got {type(config).__name__}")
    inner = config.get("text_config") or config.get("llm_config")
    text = inner if isinstance(inner, dict) else config
    r = _Reader(text, name, lines or {})
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    archs = config.get("architectures") or text.get("architectures") or [""]
    kinds = _layer_kinds(r, model_type)
    heads = r.int("num_attention_heads", r.get("n_head"))
    kv_heads = r.int("num_key_value_heads", heads)
    head_dim = r.get("head_dim") or r.get("attention_head_dim")
    if head_dim is None:
        head_dim = r.int("hidden_size") // heads
    dtype = r.dtype("dtype" if "dtype" in text else "torch_dtype",
                    str(config.get("dtype") or config.get("torch_dtype") or "bfloat16"))
    window = None
    if SLIDING in kinds:
        window = r.int("sliding_window")
    shapes, dtypes, kind, chunk = (), (), None, None
    if LINEAR in kinds:
        nk, nv = r.int("linear_num_key_heads"), r.int("linear_num_value_heads")
        dk, dv = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
        kernel = r.int("linear_conv_kernel_dim", minimum=2)
        shapes = ((dk * nk * 2 + dv * nv, kernel - 1), (nv, dv, dk))
        dtypes = (dtype, r.dtype("mamba_ssm_dtype", dtype))
        kind = "gdn"
    elif MAMBA in kinds:
        nh, hd = r.int("mamba_num_heads"), r.int("mamba_head_dim")
        state, groups = r.int("ssm_state_size"), r.int("n_groups")
        kernel = r.int("conv_kernel", minimum=2)
        shapes = ((nh * hd + 2 * groups * state, kernel - 1), (nh, hd, state))
        # vLLM: Nemotron-H's SSM state is the config's mamba_ssm_cache_dtype, else float32
        dtypes = (dtype, r.dtype("mamba_ssm_cache_dtype", "float32"))
        kind, chunk = "mamba2", r.get("chunk_size") or r.get("mamba_chunk_size")
    return ModelPreset(name, str(archs[0]), model_type, kinds, kv_heads, int(head_dim), dtype,
                       window, shapes, dtypes, kind, chunk, source, config)


def _layer_kinds(r: _Reader, model_type: str) -> tuple[str, ...]:
    n = r.config.get("num_hidden_layers")
    if r.get("layer_types") is not None:
        key, names = "layer_types", r.get("layer_types")
        if model_type.startswith("nemotron_h"):
            names = [MAMBA if x == "linear_attention" else x for x in names]
    elif r.get("layers_block_type") is not None:  # Nemotron-H, newer transformers
        key, names = "layers_block_type", [MAMBA if x == "linear_attention" else x
                                           for x in r.get("layers_block_type")]
    elif r.get("hybrid_override_pattern") is not None:
        key = "hybrid_override_pattern"
        bad = sorted(set(r.get(key)) - set(_PATTERN))
        if bad:
            raise r.fail(key, f"unknown layer symbols {bad} (M, *, -, E)")
        names = [_PATTERN[c] for c in r.get(key)]
    elif r.get("full_attention_interval") is not None:  # Qwen3-Next / Qwen3.5
        every = r.int("full_attention_interval")
        key, names = "num_hidden_layers", [FULL if (i + 1) % every == 0 else LINEAR
                                           for i in range(r.int("num_hidden_layers"))]
    elif r.get("sliding_window_pattern") is not None:  # Gemma 3: 5 local, 1 global
        every = r.int("sliding_window_pattern")
        key, names = "num_hidden_layers", [FULL if (i + 1) % every == 0 else SLIDING
                                           for i in range(r.int("num_hidden_layers"))]
    else:
        key, names = "num_hidden_layers", [FULL] * r.int("num_hidden_layers")
    if not isinstance(names, list) or not names:
        raise r.fail(key, "expected a non-empty list of layer types")
    kinds = []
    for i, x in enumerate(names):
        kind = x if x in (FULL, SLIDING, LINEAR, MAMBA, NONE) else _LAYER_NAMES.get(x)
        if kind is None:
            raise r.fail(key, f"layer {i}: unknown layer type {x!r:.40}")
        kinds.append(kind)
    if n is not None and n != len(kinds):
        raise r.fail(key, f"{len(kinds)} layers, but num_hidden_layers is {n}")
    return tuple(kinds)
