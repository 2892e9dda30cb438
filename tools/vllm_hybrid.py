"""vLLM 0.33's own hybrid prefix cache, loaded on CPU: what tools/diff_vllm_hybrid.py drives.

`load_vllm_hybrid` executes vLLM's kv_cache_interface.py (the real spec classes and the Mamba
checkpoint helpers; torch is imported for dtypes only), kv_cache_utils.py, block_pool.py,
single_type_kv_cache_manager.py, kv_cache_coordinator.py and kv_cache_manager.py from the
unpacked wheel, stubbing what they import for a GPU (platform, metrics, request). The
scheduler's `_mamba_block_aligned_split` is lifted out of scheduler.py by its syntax tree and
bound to a small object with the scheduler fields it reads (`Scheduler` is not built). `VSide`
holds one KVCacheManager and drives it the way the scheduler does. Leaves out: EAGLE, KV
connectors, async scheduling, speculative decoding, multimodal inputs.
"""

from __future__ import annotations

import ast
import enum
import logging
import sys
import types
from pathlib import Path

import msgspec
from wheels import AnyClasses, load, mocks, packages


class _Status(enum.IntEnum):  # vllm.v1.request.RequestStatus, the members the manager reads
    WAITING = 1
    RUNNING = 5
    PREEMPTED = 6


def load_vllm_hybrid(root: Path) -> types.SimpleNamespace:
    """vLLM's KVCacheManager and everything under it, as modules (see the module docstring)."""
    import torch

    src = root / "vllm"
    packages("vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched", "vllm.utils",
             "vllm.distributed", "vllm.multimodal", "vllm.v1.hisparse", "vllm.v1.attention",
             "vllm.v1.attention.backends", "vllm.v1.metrics")
    mocks("vllm.multimodal.utils", "vllm.v1.core.kv_cache_metrics", "vllm.v1.utils",
          "vllm.config.kv_events", "vllm.utils.network_utils")
    for name in ("vllm.v1.hisparse.block_pool", "vllm.v1.hisparse.coordinator"):
        sys.modules[name] = AnyClasses(name)
    config = sys.modules["vllm.config"] = AnyClasses("vllm.config")
    config.__path__ = []
    config.get_current_vllm_config_or_none = lambda: None
    logger = sys.modules["vllm.logger"] = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger
    envs = sys.modules["vllm.envs"] = types.ModuleType("vllm.envs")
    envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = True  # vLLM's default: low-64-bit ints, as ours
    sys.modules["vllm"].envs = envs
    platforms = sys.modules["vllm.platforms"] = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(
        register_custom_kv_cache_specs=lambda vllm_config: None)
    torch_utils = sys.modules["vllm.utils.torch_utils"] = types.ModuleType("torch_utils")
    torch_utils.get_dtype_size = lambda dtype: torch.tensor([], dtype=dtype).element_size()
    registry = sys.modules["vllm.v1.attention.backends.registry"] = types.ModuleType("registry")
    registry.MambaAttentionBackendEnum = enum.Enum("MambaAttentionBackendEnum",
                                                   "MAMBA1 MAMBA2 GDN_ATTN")
    request = sys.modules["vllm.v1.request"] = AnyClasses("vllm.v1.request")
    request.RequestStatus = _Status
    stats = sys.modules["vllm.v1.metrics.stats"] = AnyClasses("vllm.v1.metrics.stats")
    load("vllm.utils.math_utils", src / "utils/math_utils.py")
    hashing = load("vllm.utils.hashing", src / "utils/hashing.py")
    load("vllm.v1.kv_cache_layout", src / "v1/kv_cache_layout.py")
    load("vllm.v1.kv_cache_spec_registry", src / "v1/kv_cache_spec_registry.py")
    iface = load("vllm.v1.kv_cache_interface", src / "v1/kv_cache_interface.py")
    utils = load("vllm.v1.core.kv_cache_utils", src / "v1/core/kv_cache_utils.py")
    events = load("vllm.distributed.kv_events", src / "distributed/kv_events.py")
    pool = load("vllm.v1.core.block_pool", src / "v1/core/block_pool.py")
    stm = load("vllm.v1.core.single_type_kv_cache_manager",
               src / "v1/core/single_type_kv_cache_manager.py")
    coord = load("vllm.v1.core.kv_cache_coordinator", src / "v1/core/kv_cache_coordinator.py")
    manager = load("vllm.v1.core.kv_cache_manager", src / "v1/core/kv_cache_manager.py")
    utils.init_none_hash(hashing.sha256)
    split = _lift_method(src / "v1/core/sched/scheduler.py", "_mamba_block_aligned_split",
                         {"get_mamba_prefill_checkpoint_position":
                          iface.get_mamba_prefill_checkpoint_position,
                          "is_mamba_prefill_checkpoint_valid":
                          iface.is_mamba_prefill_checkpoint_valid})
    del stats
    return types.SimpleNamespace(iface=iface, utils=utils, pool=pool, stm=stm, coord=coord,
                                 manager=manager, hashing=hashing, events=events, torch=torch,
                                 split=split, encoder=msgspec.msgpack.Encoder())


def _lift_method(path: Path, name: str, namespace: dict):
    """The function `name` defined in a class of the file at `path`, compiled on its own with
    `namespace` as its globals (the module itself is never executed)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            module = ast.Module(body=[node], type_ignores=[])
            scope = dict(namespace)
            exec(compile(module, str(path), "exec"), scope)  # noqa: S102 - vLLM's own code
            return scope[name]
    raise LookupError(f"{path}: no method {name}")
