"""The model's forward in a process of its own, so a busy host process cannot slow it down.

The app's engines (Live, Classroom) ran their forward on a thread of the Streamlit process.
SmolLM2's forward is hundreds of short torch ops; each releases the GIL and takes it back, and
while the page's thread runs Python every take-back waits up to the switch interval
(benchmarks/engine_contention.py: 4.3 s alone, 11.7 s beside a busy thread). `ProcessBackend`
keeps EngineService's scheduler, radix tree and slot allocator where they were and sends only
each forward's batch (token ids, positions, slots) to a spawned child that holds the weights
(shared memory, not copied) and the KV rows; the last-token logits come back and are sampled
here, as in-process. One message each way per forward. Leaves out: overlapping the next
schedule with the running forward (SGLang's overlap scheduler).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as tmp

from engine.kv_pool import KVPool
from engine.model import LoadedModel
from engine.runner import Batch, ModelRunner
from radix.allocator import SlotAllocator
from radix.request import Req
from radix.runs.workers import bare_main

START_TIMEOUT_S = 300.0  # the child imports torch and maps the weights: seconds, more if busy


def _serve(conn: Any, model: Any, capacity_tokens: int, dtype: torch.dtype,
           device: torch.device, threads: int) -> None:
    """The child: a KV pool and a runner over the shared weights; answers forwards until None."""
    torch.set_num_threads(threads)
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
        ctx = tmp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, name="radixlens-model", daemon=True,
                                   args=(child, loaded.model, capacity_tokens, loaded.dtype,
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
