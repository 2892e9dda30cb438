"""vLLM 0.33's own hybrid prefix cache, loaded on CPU: what tools/diff_vllm_hybrid.py drives.

`load_vllm_hybrid` executes vLLM's kv_cache_interface.py (the real spec classes and the Mamba
checkpoint helpers; torch is imported for dtypes only), kv_cache_utils.py, block_pool.py,
single_type_kv_cache_manager.py, kv_cache_coordinator.py and kv_cache_manager.py from the
unpacked wheel, stubbing what they import for a GPU (platform, metrics, request). The
scheduler's `_mamba_block_aligned_split` is lifted out of scheduler.py by its syntax tree and
bound to a small object with the scheduler fields it reads (`Scheduler` is not built). `VSide`
holds one KVCacheManager, built from one of our layouts (radix/models/vllm.py) with vLLM's own
spec classes, and drives it the way the scheduler does; `VReq` is the Request it reads. Leaves
out: EAGLE, KV connectors, async scheduling, speculative decoding, multimodal inputs.
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
    """The function (or class) `name` defined in the file at `path`, compiled on its own with
    `namespace` as its globals (the module itself is never executed)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            module = ast.Module(body=[node], type_ignores=[])
            scope = dict(namespace)
            exec(compile(module, str(path), "exec"), scope)  # noqa: S102 - vLLM's own code
            return scope[name]
    raise LookupError(f"{path}: no method {name}")


class VReq:
    """The fields of vllm.v1.request.Request that the KV cache manager and the split read."""

    def __init__(self, hasher, rid: str, tokens: list[int], lora: str | None,
                 salt: str | None) -> None:
        self.request_id, self.all_token_ids = rid, list(tokens)
        self.num_prompt_tokens = len(tokens)
        self.lora_request = None if lora is None else types.SimpleNamespace(
            lora_name=lora, name=lora, lora_path=f"/loras/{lora}", adapter_id=1)
        self.cache_salt, self.mm_features, self.prompt_embeds = salt, [], None
        self.session_id, self.shared_prefix_boundary = None, 0
        self.num_computed_tokens = self.num_in_flight_tokens = self.num_preemptions = 0
        self.status, self.skip_reading_prefix_cache = _Status.WAITING, False
        self._hasher, self.block_hashes = hasher, []
        self.block_hashes.extend(hasher(self))

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def append(self, token: int) -> None:
        self.all_token_ids.append(token)
        self.block_hashes.extend(self._hasher(self))


class VSide:
    """vLLM's KVCacheManager for one of our layouts, plus the scheduler's Mamba split."""

    def __init__(self, v, layout, preset, num_blocks: int, budget: int) -> None:
        self.v, self.layout = v, layout
        torch, iface = v.torch, v.iface
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
                 "float32": torch.float32}
        groups = []
        for g in layout.groups:
            spec = g.kv_cache_spec
            common = dict(block_size=spec.block_size, num_kv_heads=preset.num_kv_heads,
                          head_size=preset.head_dim, dtype=dtype[preset.dtype])
            if spec.kind == "full_attention":
                vspec = iface.FullAttentionSpec(**common)
            elif spec.kind == "sliding_window":
                vspec = iface.SlidingWindowSpec(sliding_window=spec.sliding_window, **common)
            else:
                vspec = iface.MambaSpec(
                    block_size=spec.block_size, shapes=preset.mamba_state_shapes,
                    dtypes=tuple(dtype[d] for d in preset.mamba_state_dtypes),
                    page_size_padded=layout.page_size_bytes,
                    mamba_cache_mode=spec.mamba_cache_mode,
                    num_prefill_checkpoint_blocks=spec.num_prefill_checkpoint_blocks,
                    prefill_checkpoint_alignment=spec.prefill_checkpoint_alignment)
            groups.append(iface.KVCacheGroupSpec(list(g.layer_names), vspec))
        self.specs = [g.kv_cache_spec for g in groups]
        opts = layout.options
        config = iface.KVCacheConfig(
            num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups,
            prefix_cache_retention_interval=opts.prefix_cache_retention_interval)
        self.mgr = v.manager.KVCacheManager(
            config, max_model_len=opts.max_model_len,
            scheduler_block_size=layout.scheduler_block_size,
            hash_block_size=layout.hash_block_size, max_in_flight_tokens=budget,
            enable_caching=layout.enable_caching, enable_kv_cache_events=True)
        self.coord = self.mgr.coordinator
        self.pool = self.mgr.block_pool
        self.hasher = v.utils.get_request_block_hasher(layout.hash_block_size, v.hashing.sha256)
        mamba = [s for s in self.specs if isinstance(s, iface.MambaSpec)]
        align = bool(mamba) and mamba[0].mamba_cache_mode == "align"
        bs = layout.scheduler_block_size
        self.sched = types.SimpleNamespace(
            block_size=bs, cache_config=types.SimpleNamespace(block_size=layout.block_size),
            hash_block_size=layout.hash_block_size, use_eagle_block_drop=False,
            num_hash_lookahead_tokens=0, max_num_scheduled_tokens=budget,
            scheduler_config=types.SimpleNamespace(long_prefill_token_threshold=0),
            mamba_has_prefill_checkpoint_blocks=bool(mamba) and all(
                s.num_prefill_checkpoint_blocks > 0 for s in mamba),
            mamba_prefill_checkpoint_alignment=(mamba[0].prefill_checkpoint_alignment
                                                if mamba else None),
            mamba_partial_cache_hit=align and layout.hash_block_size < bs and getattr(
                self.coord, "enable_partial_hash_hits", False),
            mamba_shared_prefix_checkpoint=False)
        self.align = align

    def lookup(self, req: VReq):
        blocks, hit, spb = self.mgr.get_computed_blocks(req)
        req.shared_prefix_boundary = spb  # the scheduler stores it at admission
        return blocks, hit, spb

    def split(self, req: VReq, num_new: int, local: int) -> int:
        if not self.align:
            return num_new
        return self.v.split(self.sched, req, num_new, local, 0)

    def per_group_hits(self, req: VReq) -> tuple[int, ...]:
        """Each group's own hit, looked up alone (vLLM's managers, one group id each)."""
        coord, out = self.coord, []
        for gid, manager in enumerate(coord.single_type_managers):
            if not self.layout.enable_caching:
                out.append(0)
                continue
            align = getattr(coord, "_cache_hit_alignment_tokens", manager.block_size)
            _, n = type(manager).find_longest_cache_hit(
                block_hashes=req.block_hashes, max_length=req.num_tokens - 1,
                kv_cache_group_ids=[gid], block_pool=self.pool,
                kv_cache_spec=manager.kv_cache_spec, drop_eagle_block=False,
                alignment_tokens=align)
            out.append(n)
        return tuple(out)

    def allocate(self, req: VReq, num_new: int, blocks=None, hit: int = 0,
                 must_fit: bool = False):
        out = self.mgr.allocate_slots(req, num_new, num_new_computed_tokens=hit,
                                      new_computed_blocks=blocks,
                                      full_sequence_must_fit=must_fit)
        if out is None:
            return None
        req.num_computed_tokens += hit + num_new
        req.status = _Status.RUNNING
        return out.blocks

    def free(self, req: VReq) -> None:
        self.mgr.free(req)

    def end_step(self) -> list[tuple[int, int]]:
        """This step's copy-on-write pairs; their held blocks go back to the pool."""
        copies, retained = self.mgr.take_kv_cache_block_copies()
        if copies:
            self.pool.free_blocks(retained)
        return [(c.src_block_id, c.dst_block_id) for c in copies]


def check_layouts(v, root: Path, presets) -> list[str]:
    """Our presets' bytes and groups against vLLM's own code: the state shapes of
    MambaStateShapeCalculator (lifted from mamba_utils.py, TP 1), the page sizes of vLLM's
    spec classes, and the groups of `_get_kv_cache_groups_uniform_page_size` (lifted from
    kv_cache_planning.py) over one vLLM spec per layer. Returns the differences (none: [])."""
    from collections import defaultdict

    torch, iface = v.torch, v.iface
    src = root / "vllm"
    calc = _lift_method(src / "model_executor/layers/mamba/mamba_utils.py",
                        "MambaStateShapeCalculator",
                        {"divide": lambda a, b: a // b, "is_conv_state_dim_first": lambda: True})
    scope = {"KVCacheGroupSpec": iface.KVCacheGroupSpec, "defaultdict": defaultdict,
             "cdiv": lambda a, b: -(-a // b), "logger": logging.getLogger("vllm")}
    scope["create_kv_cache_group_specs"] = _lift_method(
        src / "v1/core/kv_cache_planning.py", "create_kv_cache_group_specs", scope)
    grouping = _lift_method(src / "v1/core/kv_cache_planning.py",
                            "_get_kv_cache_groups_uniform_page_size", scope)
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    problems = []
    for preset, layout in presets:
        c = preset.config.get("text_config") or preset.config
        if preset.mamba_kind == "gdn":
            shapes = calc.gated_delta_net_state_shape(
                1, c["linear_num_key_heads"], c["linear_num_value_heads"],
                c["linear_key_head_dim"], c["linear_value_head_dim"],
                c["linear_conv_kernel_dim"])
        elif preset.mamba_kind == "mamba2":
            shapes = calc.mamba2_state_shape(
                1, c["mamba_num_heads"] * c["mamba_head_dim"], c["n_groups"],
                c["mamba_num_heads"], c["mamba_head_dim"], c["ssm_state_size"],
                c["conv_kernel"])
        else:
            shapes = ()
        if tuple(map(tuple, shapes)) != preset.mamba_state_shapes:
            problems.append(f"{preset.name}: state shapes {shapes} != {preset.mamba_state_shapes}")
        attn = dict(num_kv_heads=preset.num_kv_heads, head_size=preset.head_dim,
                    dtype=dtypes[preset.dtype])
        if iface.FullAttentionSpec(block_size=1, **attn).page_size_bytes != (
                preset.kv_bytes_per_token_per_layer):
            problems.append(f"{preset.name}: KV bytes per token per layer")
        mamba = None
        if shapes:
            mamba = iface.MambaSpec(block_size=layout.mamba_block_size, shapes=tuple(shapes),
                                    dtypes=tuple(dtypes[d] for d in preset.mamba_state_dtypes),
                                    page_size_padded=layout.page_size_bytes)
            if mamba.real_page_size_bytes != preset.mamba_state_bytes_per_layer:
                problems.append(f"{preset.name}: Mamba state bytes")
        per_layer = {}
        for i, kind in enumerate(preset.layer_types):
            if kind == "full_attention":
                per_layer[f"layers.{i}"] = iface.FullAttentionSpec(block_size=layout.block_size,
                                                                   **attn)
            elif kind == "sliding_attention":
                per_layer[f"layers.{i}"] = iface.SlidingWindowSpec(
                    block_size=layout.block_size, sliding_window=preset.sliding_window, **attn)
            elif kind != "none":
                per_layer[f"layers.{i}"] = mamba
        if len(set(per_layer.values())) == 1:
            theirs = [(tuple(per_layer), type(mamba or next(iter(per_layer.values()))))]
        else:
            theirs = [(tuple(g.layer_names), type(g.kv_cache_spec)) for g in grouping(per_layer)]
        kinds = {"full_attention": iface.FullAttentionSpec, "mamba": iface.MambaSpec,
                 "sliding_window": iface.SlidingWindowSpec}
        ours = [(g.layer_names, kinds[g.kv_cache_spec.kind]) for g in layout.groups]
        if theirs != ours:
            problems.append(f"{preset.name}: groups {theirs} != ours {ours}")
    return problems
