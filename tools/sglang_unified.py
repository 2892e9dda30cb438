"""SGLang 0.5.23's UnifiedRadixCache, imported from an unpacked wheel and built on CPU (not a test).

The unified cache imports half of SGLang at module load, so unlike tools/diff_sglang.py (which
loads three files by path) this imports the real package and stubs, with an import hook, only
what needs a GPU stack or is not installed: GPU kernels (sglang.kernels, triton, tvm_ffi), model
layers, model configs and distributed communicators, and a few pure-Python dependencies the
cache never calls (orjson, pybase64, dill, aiohttp, IPython, partial_json_parser). torch's own
inductor modules are imported first, before the hook, so that torch never sees the triton stub.
`build` makes a cache with the FULL component only (a standard full-attention model) over a
given TreeCore backend: "rust" (0.5.23's default, the bundled extension) or "python".
`command_line` is the options the drivers over it share (tools/diff_sglang_unified.py,
tools/diff_sglang_hicache.py).
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

STUBBED = ("IPython", "aiohttp", "orjson", "pybase64", "triton", "tvm_ffi", "dill",
           "partial_json_parser", "sglang.kernels", "sglang.srt.configs", "sglang.srt.layers",
           "sglang.srt.distributed")
CORES = ("rust", "python")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every import under a STUBBED name with a MagicMock package."""

    def find_spec(self, name, path, target=None):
        if any(name == p or name.startswith(p + ".") for p in STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module) -> None: ...


def load_unified(root: Path) -> SimpleNamespace:
    """The modules a driver needs, imported from the wheel unpacked at `root`."""
    import torch  # noqa: F401  (the Rust extension needs libtorch resident before dlopen)
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401

    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, str(root))
    from sglang.srt.mem_cache import base_prefix_cache, cache_init_params, common, radix_cache
    from sglang.srt.mem_cache.allocator import base as alloc_base
    from sglang.srt.mem_cache.unified_cache import component_type
    from sglang.srt.mem_cache.unified_cache.components import base as comp_base
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    common.page_interleave_shard_size = lambda allocator: 1
    # the runtime config a server publishes at start; a speculative algorithm is named so that
    # release_kv_cache accepts over-allocated rows (the drivers make some, as a draft would)
    common.get_spec = lambda: SimpleNamespace(speculative_algorithm="a draft")
    common.get_serving = lambda: SimpleNamespace(strip_thinking_cache=False)
    return SimpleNamespace(UnifiedRadixCache=UnifiedRadixCache, common=common,
                           base=base_prefix_cache, params=cache_init_params,
                           alloc_base=alloc_base, radix=radix_cache,
                           FULL=component_type.ComponentType.FULL, comp_base=comp_base)


def command_line(doc: str, seeds: int, policies: Sequence[str],
                 breaks: Mapping[str, Callable[[], None]],
                 own: Callable[[argparse.ArgumentParser], None]) -> tuple[argparse.Namespace,
                                                                      SimpleNamespace]:
    """A driver's options parsed: root, --seeds, the driver's `own`, --cores, --policies,
    --pages, --break-rule (the rule flipped in ours here); then SGLang loaded from root."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("root", type=Path, help="folder holding the unpacked sglang package")
    ap.add_argument("--seeds", type=int, default=seeds)
    own(ap)
    ap.add_argument("--cores", default=",".join(CORES))
    ap.add_argument("--policies", default=",".join(policies))
    ap.add_argument("--pages", default="1,16")
    ap.add_argument("--break-rule", choices=tuple(breaks), help="flip one rule in ours")
    args = ap.parse_args()
    if args.break_rule:
        breaks[args.break_rule]()
    if not (args.root / "sglang/srt/mem_cache/unified_radix_cache.py").exists():
        ap.error(f"{args.root}: no sglang/srt/mem_cache/unified_radix_cache.py there")
    return args, load_unified(args.root)


def build(sg: SimpleNamespace, params, core: str):
    """A UnifiedRadixCache with the FULL component over the `core` TreeCore."""
    if core not in CORES:
        raise ValueError(f"core must be one of {CORES}, got {core!r}")
    cache = sg.UnifiedRadixCache(replace(params, tree_components=(sg.FULL,),
                                         tree_core_backend=core))
    got = type(cache.tree_core).__name__
    if (core == "rust") != got.startswith("Rust"):
        raise RuntimeError(f"asked for the {core} TreeCore, got {got}")
    return cache
