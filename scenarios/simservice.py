"""A simulated engine service: EngineService's calls over the real scheduler and caches, priced.

`SimService` answers the calls `LiveSession` and the classroom make of engine/service.py's
EngineService (`submit` -> RequestHandle, `call`, `close(cancel=)`, `shadow`, `steps`, a listener
hearing every stamped event), with the same one-thread loop: radix's Scheduler over the radix
tree and vLLM's block shadow. The runner is radix's SimRunner (priced for Llama-3-8B on an H100,
derived, not measured) on a SlotAllocator, so no model is loaded and nothing is computed: tests
and a room without the model run it. Every reply is REPLY's tokens. `step_s` paces
the loop (seconds per step) so a room's view changes at a visible rate.
Leaves out: EOS and sampling, KV-event publishing, page sizes above 1.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from engine.handles import (
    STOP,
    RequestCancelled,
    RequestHandle,
    RidRegistry,
    StampedEvent,
    StampingSink,
    add_rates,
    drain_inbox,
    fail_queued,
)
from radix.allocator import SlotAllocator
from radix.request import Req
from radix.runs.costs import CostModel
from radix.runs.sim import BlockShadow, SimClock, SimRunner
from radix.sched.scheduler import Scheduler, SchedulerConfig, StepReport, check_fits
from radix.tree.radix_cache import RadixCache

REPLY = "(sim) ok"  # every answer's text (repeated or cut to max_new_tokens)


class SimService:
    """Same constructor shape as EngineService(loaded, capacity_tokens, ...); `loaded` only
    needs a `tokenizer` (its `decode` makes each result's text)."""

    def __init__(self, loaded: Any, capacity_tokens: int, *, no_cache: bool = False,
                 config: SchedulerConfig | None = None,
                 listener: Callable[[StampedEvent], None] | None = None,
                 max_events: int = 10_000, step_s: float = 0.0) -> None:
        self.tokenizer, self.step_s = loaded.tokenizer, step_s
        encode = getattr(self.tokenizer, "encode", None)
        self._reply = list(encode(REPLY)) if encode else [0]  # what every request "generates"
        self.events: deque[StampedEvent] = deque(maxlen=max_events)
        lock = threading.Lock()
        sinks = {s: StampingSink(s, self.events, lock, listener)
                 for s in ("tree", "blocks", "scheduler")}
        self.clock = SimClock()
        self.pool = SlotAllocator(capacity_tokens)
        self.tree = RadixCache(sink=sinks["tree"], disable=no_cache, allocator=self.pool)
        self.shadow = BlockShadow(capacity_tokens, 16, enable_caching=not no_cache,
                                  sink=sinks["blocks"])
        self.replies: dict[str, list[int]] = {}  # rid -> the tokens it will "generate"
        self.runner = SimRunner(CostModel(), self.clock)
        self.runner.outputs = self.replies  # subtle: SimRunner swaps an empty mapping for its own
        self.scheduler = Scheduler(self.runner, self.tree, self.pool, config, clock=self.clock,
                                   sink=sinks["scheduler"], shadow=self.shadow)
        self.steps: deque[StepReport] = deque(maxlen=200)
        self._inbox: queue.Queue = queue.Queue()
        self._handles: dict[str, tuple[RequestHandle, Req]] = {}
        self._streamed: dict[str, int] = {}  # rid -> output tokens already pushed
        self._lock = threading.Lock()
        self._closed = False
        self._rids = RidRegistry()
        self._thread = threading.Thread(target=self._loop, name="radixlens-sim", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], max_new_tokens: int = 16, *,
               rid: str | None = None) -> RequestHandle:
        """Queues token ids; ValueError if they could never fit, RuntimeError once closed."""
        if max_new_tokens < 1 or not prompt:
            raise ValueError("a request needs prompt tokens and max_new_tokens >= 1")
        req = Req("(new)", list(prompt), max_new_tokens=max_new_tokens, arrival=self.clock())
        check_fits(req, self.pool.size)
        with self._lock:
            if self._closed:
                raise RuntimeError("this engine service is closed; start a new one")
            req.rid = self._rids.claim(rid)
            self.replies[req.rid] = (self._reply * max_new_tokens)[:max_new_tokens]
            handle = RequestHandle(req.rid, self.tokenizer)
            self._inbox.put((handle, req))
        return handle

    def call(self, fn: Callable[[], Any], timeout: float | None = 60.0) -> Any:
        """Runs `fn` on the loop's thread between two steps."""
        future: Future = Future()
        with self._lock:
            if not self._thread.is_alive():
                raise RuntimeError("this engine service is closed; start a new one")
            self._inbox.put((fn, future))
        return future.result(timeout)

    def close(self, timeout: float | None = None, *, cancel: bool = False) -> None:
        """Stops the loop: queued and running requests finish first, or (cancel) each gets
        RequestCancelled. Joins the thread (up to `timeout`)."""
        with self._lock:
            self._closed = True
            self._inbox.put((STOP, cancel))
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _loop(self) -> None:
        stopping = False
        wake = threading.Event()  # never set: a pause between steps that is not a sleep call
        try:
            while True:
                idle = not (stopping or self.scheduler.has_work)
                stop = drain_inbox(self._inbox, idle, self._admit)
                if stop:  # cancel
                    return
                stopping |= stop is not None
                if stopping and not self.scheduler.has_work:
                    return
                if self.scheduler.has_work:
                    self._publish(self.scheduler.step())
                    if self.step_s:
                        wake.wait(self.step_s)
        finally:
            self._answer_all()

    def _admit(self, handle: RequestHandle, req: Req) -> None:
        self.scheduler.add_request(req)
        self._handles[req.rid] = (handle, req)

    def _publish(self, report: StepReport) -> None:
        self.steps.append(report)
        for rid in report.rids:
            handle, req = self._handles[rid]
            handle._push(req.output_ids[self._streamed.get(rid, 0):])
            self._streamed[rid] = len(req.output_ids)
        for rid in report.finished:
            handle, req = self._handles.pop(rid)
            self.replies.pop(rid, None)
            self._streamed.pop(rid, None)
            add_rates(req)
            handle._finish(req)
        if len(self.scheduler.finished) > 400:
            del self.scheduler.finished[:-200]

    def _answer_all(self) -> None:
        """Every request still held or queued gets RequestCancelled; queued calls fail too."""
        why = RequestCancelled("cancelled: the engine service closed")
        for handle, _ in self._handles.values():
            handle._finish(None, why)
        self._handles.clear()
        fail_queued(self._inbox, why)
