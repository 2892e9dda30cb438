"""How a model process starts fast on CPU: the weights shared, the child forked, not spawned.

engine/procservice.py runs the app's engines (Live, Classroom) in a child process each, so that
the page's Python cannot slow their loop. Starting one is quick on CPU: children fork from a
server process that imported torch and transformers once (multiprocessing's forkserver with both
modules preloaded, `prestart` starts it early), and the weights cross as one shared buffer per
dtype (`SharedWeights`) that the child maps into a model skeleton built on the meta device
(`shipping` in the parent, `landed` in the child). A spawned child imported torch and
transformers itself (about 20 CPU-s; 44 s each at load 6 on 2 cores, three starts in a row) and
received each of the model's ~270 tensors as a file descriptor of its own (a forkserver passes
at most 256). CUDA models keep spawn and torch's CUDA handles: the forkserver path is CPU-only.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing.forkserver
import threading
from collections.abc import Iterator
from typing import Any

import torch
import torch.multiprocessing as tmp
from transformers import AutoModelForCausalLM

START_TIMEOUT_S = 300.0  # the child imports torch and maps the weights: seconds, more if busy


class SharedWeights:
    """A model as it crosses to a child process: its config and, per dtype, one shared-memory
    buffer holding every parameter and buffer, with each tensor's name, kind and place in it.
    Made with `of(model)`, which repacks the model's own tensors in place (same values) into
    those buffers once, so the parent keeps one copy and the child maps the same pages; `build()`
    in the child makes the model's skeleton on the meta device and points it at them. Tied
    weights (lm_head and the embeddings) are one tensor under two names, one place."""

    _PACK = threading.Lock()

    def __init__(self, config: Any, flats: dict[torch.dtype, torch.Tensor],
                 layout: tuple[tuple[str, bool, torch.dtype, tuple[int, ...], int], ...]) -> None:
        self.config, self.flats, self.layout = config, flats, layout

    @classmethod
    def of(cls, model: Any) -> SharedWeights:
        with cls._PACK:
            packed = getattr(model, "_radixlens_shared", None)
            if packed is None:
                packed = model._radixlens_shared = cls._pack(model)
        return packed

    @classmethod
    def _pack(cls, model: Any) -> SharedWeights:
        named = [(name, True, t) for name, t in model.named_parameters(remove_duplicate=False)]
        named += [(name, False, t) for name, t in model.named_buffers(remove_duplicate=False)]
        place: dict[int, int] = {}  # id(tensor) -> offset in its dtype's buffer
        sizes: dict[torch.dtype, int] = {}
        for _, _, t in named:
            if id(t) not in place:
                place[id(t)] = sizes.get(t.dtype, 0)
                sizes[t.dtype] = place[id(t)] + t.numel()
        flats = {dt: torch.empty(n, dtype=dt).share_memory_() for dt, n in sizes.items()}
        copied: set[int] = set()
        for _, _, t in named:
            if id(t) not in copied:
                flats[t.dtype][place[id(t)]:place[id(t)] + t.numel()].copy_(t.detach().reshape(-1))
                copied.add(id(t))
        shared = cls(model.config, flats, tuple((name, is_param, t.dtype, tuple(t.shape),
                                                 place[id(t)]) for name, is_param, t in named))
        for module, attr, is_param, _, view in shared._views(model):  # the parent reads them now
            if is_param:
                module._parameters[attr].data = view
            else:
                module._buffers[attr] = view
        return shared

    def _views(self, model: Any) -> Iterator[tuple[Any, str, bool, tuple, torch.Tensor]]:
        """(module, attribute, is a parameter, place, its view of the buffers) per name."""
        for name, is_param, dt, shape, off in self.layout:
            owner, _, attr = name.rpartition(".")
            view = self.flats[dt][off:off + math.prod(shape)].view(shape)
            yield model.get_submodule(owner), attr, is_param, (dt, off), view

    def build(self) -> Any:
        """The model in the child: a skeleton on the meta device (no weights allocated, no
        initialisation), each tensor then a view of the shared buffers."""
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(self.config)
        params: dict[tuple, torch.nn.Parameter] = {}
        for module, attr, is_param, place, view in self._views(model):
            if is_param:  # one Parameter per place: tied names stay tied
                if place not in params:
                    params[place] = torch.nn.Parameter(view, requires_grad=False)
                module._parameters[attr] = params[place]
            else:
                module._buffers[attr] = view
        left = [n for n, t in itertools.chain(model.named_parameters(), model.named_buffers())
                if t.is_meta]
        if left:
            raise RuntimeError(f"the shared weights do not cover {left[:3]}")
        return model.eval()


# what the forkserver imports once (by name: engine/procservice.py sits above this module)
PRELOAD = [__name__, "engine.procservice"]


def _context(device: torch.device) -> Any:
    """forkserver (preloading PRELOAD) on CPU; spawn where torch's CUDA is in play."""
    if device.type != "cpu":
        return tmp.get_context("spawn")
    ctx = tmp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def shipping(loaded: Any) -> tuple[Any, Any]:
    """The multiprocessing context a model process starts in, and `loaded` (a LoadedModel, or
    a stand-in without a model or a device: CPU) as it crosses: on CPU its model as
    SharedWeights (the child calls `landed`), elsewhere as it is."""
    device = getattr(loaded, "device", torch.device("cpu"))
    if device.type == "cpu" and getattr(loaded, "model", None) is not None:
        loaded = dataclasses.replace(loaded, model=SharedWeights.of(loaded.model))
    return _context(device), loaded


def landed(loaded: Any) -> Any:
    """In the child: `loaded` with its model built from the SharedWeights it crossed as."""
    if isinstance(getattr(loaded, "model", None), SharedWeights):
        return dataclasses.replace(loaded, model=loaded.model.build())
    return loaded


def prestart() -> None:
    """Starts the forkserver now (on a CPU-only machine) so that its imports run while the
    caller loads the weights; the first ProcessService then forks at once. Returns at once."""
    if not torch.cuda.is_available():
        _context(torch.device("cpu"))
        multiprocessing.forkserver.ensure_running()
