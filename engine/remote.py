"""The model's forward in a process of its own, so a busy host process cannot slow it down.

The app's engines (Live, Classroom) ran their forward on a thread of the Streamlit process.
SmolLM2's forward is hundreds of short torch ops; each releases the GIL and takes it back, and
while the page's thread runs Python every take-back waits up to the switch interval
(benchmarks/engine_contention.py: 4.3 s alone, 11.7 s beside a busy thread). `ProcessBackend`
keeps EngineService's scheduler, radix tree and slot allocator where they were and sends only
each forward's batch (token ids, positions, slots) to a spawned child that holds the weights
(shared memory, not copied) and the KV rows; the last-token logits come back and are sampled
here, as in-process. One message each way per forward. The app runs the whole service in the
child (engine/procservice.py: the loop's Python was still slowed here); this split stays as a
backend and a benchmark case. Leaves out: overlapping the next schedule with the running forward
(SGLang's overlap scheduler).

Starting a child is quick on CPU (both kinds: this module's and engine/procservice.py's):
children fork from a server process that imported torch and transformers once
(multiprocessing's forkserver with both modules preloaded), and the weights cross as one shared
buffer per dtype (`SharedWeights`) that the child maps into a model skeleton built on the meta
device. A spawned child imported torch and transformers itself (about 20 CPU-s; 44 s each at
load 6 on 2 cores, three starts in a row) and received each of the model's ~270 tensors as a
file descriptor of its own (a forkserver passes at most 256). CUDA models keep spawn and
torch's CUDA handles: the forkserver path is CPU-only.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing.forkserver
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as tmp
from transformers import AutoModelForCausalLM

from engine.kv_pool import KVPool
from engine.model import LoadedModel
from engine.runner import Batch, ModelRunner
from radix.request import Req, SlotAllocator
from radix.runs.workers import bare_main

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
    caller loads the weights; the first ProcessBackend then forks at once. Returns at once."""
    if not torch.cuda.is_available():
        _context(torch.device("cpu"))
        multiprocessing.forkserver.ensure_running()


def _serve(conn: Any, model: Any, capacity_tokens: int, dtype: torch.dtype,
           device: torch.device, threads: int) -> None:
    """The child: a KV pool and a runner over the shared weights; answers forwards until None."""
    torch.set_num_threads(threads)
    if isinstance(model, SharedWeights):
        model = model.build()
    runner = ModelRunner(model, KVPool.for_model(model.config, capacity_tokens, dtype, device))
    conn.send(("ready", None))
    while (msg := conn.recv()) is not None:
        try:
            logits = runner.forward(Batch(*msg))
            conn.send(("ok", logits.cpu().numpy()))
        except Exception as exc:  # noqa: BLE001 - the parent raises it on its engine thread
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class RemoteRunner(ModelRunner):
    """ModelRunner whose `forward` runs in the child (extend, decode and sampling stay here)."""

    def __init__(self, conn: Any, process: Any, device: torch.device) -> None:
        self.conn, self.process, self.device, self.last_logits = conn, process, device, None

    def forward(self, batch: Batch) -> torch.Tensor:
        try:
            self.conn.send(tuple(batch))
            kind, payload = self.conn.recv()
        except (EOFError, OSError) as exc:  # the child died: the engine loop fails with this
            self.process.join(1)
            raise RuntimeError(f"the model process is gone (exit code {self.process.exitcode})"
                               ) from exc
        if kind != "ok":
            raise RuntimeError(f"the model process failed a forward: {payload}")
        return torch.from_numpy(np.asarray(payload))

    def _elapsed(self, start: float) -> float:
        return time.perf_counter() - start  # the child synchronised before it answered


class ProcessBackend:
    """EngineService's `backend=`: the loaded model's forward in a spawned child process, over a
    KV pool of `capacity_tokens` slots there (the slot numbers are allocated here). The child's
    torch runs `threads` threads: by default one core fewer than the machine's (at least one),
    so the host process's Python keeps a core (torch's threads wait for each other at every op:
    one of them preempted stalls the op)."""

    step_s = 0.0

    def __init__(self, loaded: LoadedModel, capacity_tokens: int, page_size: int = 1,
                 threads: int | None = None) -> None:
        threads = threads or max(1, (os.cpu_count() or 2) - 1)
        KVPool.bytes_per_token_of(loaded.model.config, loaded.dtype)  # fails here, not there
        self.pool = SlotAllocator(capacity_tokens)  # KVPool's own allocator, slots 1..size
        self.clock = time.monotonic
        self.vocab_size = loaded.model.config.vocab_size
        self.max_context = loaded.max_context
        self.eos_ids = loaded.eos_token_ids
        ctx, shipped = shipping(loaded)
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, name="radixlens-model", daemon=True,
                                   args=(child, shipped.model, capacity_tokens, loaded.dtype,
                                         loaded.device, threads))
        with bare_main():
            self.process.start()
        child.close()
        if not self._conn.poll(START_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"the model process did not start in {START_TIMEOUT_S:.0f} s")
        try:
            self._conn.recv()  # ("ready", None)
        except EOFError:
            self.close()
            raise RuntimeError(f"the model process exited at start (code "
                               f"{self.process.exitcode})") from None
        self.runner = RemoteRunner(self._conn, self.process, loaded.device)

    def accepted(self, req: Req) -> None:
        pass

    def finished(self, rid: str) -> None:
        pass

    def close(self) -> None:
        """Stops the child (it frees its KV rows); idempotent."""
        if self.process.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        self._conn.close()
