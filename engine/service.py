"""The engine service: one background thread owns the caches and runs the scheduler loop.

Callers `submit` prompts from any thread through a thread-safe queue and get a `RequestHandle`:
streamed token ids and, at the end, the text and per-request metrics (matched and prefilled
tokens, TTFT, decode tokens/s). The loop is `engine/scheduler.py` over `ModelRunner`, the radix
tree (SGLang) on the KV pool, and vLLM's block-hash cache shadowing the same requests at the same
capacity. Every cache event is stamped with its request id and the wall clock for the live view.
Leaves out: stop strings and EOS (requests run to max_new_tokens, as benchmarks' ignore_eos).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple

from engine.kv_pool import KVPool
from engine.model import LoadedModel
from engine.runner import ModelRunner
from radix.events import Event, StepEnded, StepStarted
from radix.request import Req
from radix.runs.sim import BlockShadow
from radix.sched.scheduler import Scheduler, SchedulerConfig, StepReport, check_fits
from radix.tree.radix_cache import RadixCache

_STOP = object()
_DONE = object()
# subtle: HF fast tokenizers are not safe to use from two threads at once, and one loaded model
# (with its tokenizer) is shared by every service in the process (the app's sessions), so the
# lock is process-wide, not per service.
TOKENIZER_LOCK = threading.Lock()


class StampedEvent(NamedTuple):
    rid: str | None  # the request the event is about (from the event, or its step's StepStarted)
    wall_time: float  # time.time() when it was emitted
    source: str  # "tree", "blocks" or "scheduler"
    event: Event


class StampingSink:
    """Stamps each event with a request id and the wall clock, then keeps it (bounded) and
    passes it to `listener`. Micro-events take the rid of the StepStarted that opened their step."""

    def __init__(self, source: str, log: deque, lock: threading.Lock,
                 listener: Callable[[StampedEvent], None] | None) -> None:
        self.source, self.log, self.lock, self.listener = source, log, lock, listener
        self.current_rid: str | None = None

    def emit(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self.current_rid = event.rid
        rid = getattr(event, "rid", None) or self.current_rid
        stamped = StampedEvent(rid, time.time(), self.source, event)
        with self.lock:
            self.log.append(stamped)
        if self.listener is not None:
            self.listener(stamped)
        if isinstance(event, StepEnded):
            self.current_rid = None


class RequestResult(NamedTuple):
    rid: str
    output_ids: list[int]  # generated token ids
    text: str  # their decoded text
    metrics: dict[str, float]  # matched_tokens, prefilled_tokens, ttft, decode_tps, ...


class RequestHandle:
    """What `submit` returns: iterate `tokens()` for the stream, or wait on `result()`."""

    def __init__(self, rid: str, tokenizer: Any) -> None:
        self.rid = rid
        self._tokenizer = tokenizer
        self._stream: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._result: RequestResult | None = None
        self._error: BaseException | None = None

    def tokens(self, timeout: float | None = None) -> Iterator[int]:
        """Yields token ids as the engine produces them; ends when the request finishes."""
        while True:
            item = self._stream.get(timeout=timeout)
            if item is _DONE:
                if self._error is not None:
                    raise self._error
                return
            yield item

    def result(self, timeout: float | None = None) -> RequestResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.rid} not finished after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _push(self, token_ids: list[int]) -> None:
        for t in token_ids:
            self._stream.put(t)

    def _finish(self, req: Req | None, error: BaseException | None = None) -> None:
        if req is not None:
            with TOKENIZER_LOCK:
                text = self._tokenizer.decode(req.output_ids)
            self._result = RequestResult(self.rid, list(req.output_ids), text, req.metrics)
        self._error = error
        self._stream.put(_DONE)
        self._done.set()


class EngineService:
    """Owns model runner, KV pool, radix tree, block shadow and scheduler in one thread.

    `capacity_tokens` sizes the pool (and the shadow). `no_cache=True` disables the tree (every
    match empty, SGLang's --disable-radix-cache) and the block cache's caching. `page_size`
    is the tree's (matches and inserts in whole pages); the pool stays one slot per token.
    """

    def __init__(self, loaded: LoadedModel, capacity_tokens: int, *, no_cache: bool = False,
                 config: SchedulerConfig | None = None, block_size: int = 16, page_size: int = 1,
                 max_events: int = 200_000,
                 listener: Callable[[StampedEvent], None] | None = None) -> None:
        self.loaded, self.tokenizer = loaded, loaded.tokenizer
        self.events: deque[StampedEvent] = deque(maxlen=max_events)
        self._events_lock = threading.Lock()
        sinks = {s: StampingSink(s, self.events, self._events_lock, listener)
                 for s in ("tree", "blocks", "scheduler")}
        self.pool = KVPool.for_model(loaded.model.config, capacity_tokens, loaded.dtype,
                                     loaded.device)
        self.tree = RadixCache(page_size=page_size, sink=sinks["tree"], disable=no_cache,
                               allocator=self.pool)
        self.shadow = BlockShadow(capacity_tokens, block_size, enable_caching=not no_cache,
                                  sink=sinks["blocks"])
        self.runner = ModelRunner(loaded.model, self.pool)
        self.scheduler = Scheduler(self.runner, self.tree, self.pool, config,
                                   clock=time.monotonic, sink=sinks["scheduler"],
                                   shadow=self.shadow)
        self.steps: list[StepReport] = []
        self._inbox: queue.Queue = queue.Queue()
        self._handles: dict[str, tuple[RequestHandle, Req]] = {}
        self._streamed: dict[str, int] = {}  # rid -> output tokens already pushed to its handle
        self._closed = False
        self._ids = itertools.count(1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="radixlens-engine", daemon=True)
        self._thread.start()

    # --- callers' side (any thread) -------------------------------------------------------
    def submit(self, prompt: str | list[int], max_new_tokens: int = 16, *,
               rid: str | None = None, chat: bool = False, extra_key: str | None = None,
               cache_salt: str | None = None, priority: int = 0) -> RequestHandle:
        """Queues a request: token ids, raw text, or (chat=True) one user message.
        `extra_key` and `cache_salt` are namespaces: requests share KV only within one."""
        if self._closed:
            raise RuntimeError("this engine service is closed; start a new one")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        token_ids = self.encode(prompt, chat) if isinstance(prompt, str) else list(prompt)
        vocab = self.loaded.model.config.vocab_size
        if not token_ids or min(token_ids) < 0 or max(token_ids) >= vocab:
            raise ValueError(f"prompt token ids must be non-empty and in [0, {vocab})")
        rid = rid or f"req-{next(self._ids)}"
        req = Req(rid, token_ids, max_new_tokens=max_new_tokens, extra_key=extra_key,
                  cache_salt=cache_salt, priority=priority, arrival=time.monotonic())
        check_fits(req, self.pool.size, self.tree.page_size)  # here, not on the engine thread
        handle = RequestHandle(rid, self.tokenizer)
        self._inbox.put((handle, req))
        return handle

    def encode(self, text: str, chat: bool = False) -> list[int]:
        with TOKENIZER_LOCK:
            if chat:
                return list(self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": text}], add_generation_prompt=True,
                    tokenize=True, return_dict=True)["input_ids"])
            return list(self.tokenizer(text)["input_ids"])

    def call(self, fn: Callable[[], Any], timeout: float | None = 60.0) -> Any:
        """Runs `fn` on the engine thread between two steps (e.g. a tree snapshot)."""
        future: Future = Future()
        self._inbox.put((fn, future))
        return future.result(timeout)

    def snapshot(self) -> Any:
        return self.call(self.tree.snapshot)

    def close(self, timeout: float | None = None) -> None:
        """Finishes the queued work, then stops the thread; raises the engine's error if any."""
        self._closed = True
        self._inbox.put(_STOP)
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error

    def __enter__(self) -> EngineService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the engine thread ----------------------------------------------------------------
    def _loop(self) -> None:
        stopping = False
        try:
            while not (stopping and not self.scheduler.has_work):
                stopping |= self._take_inbox(block=not self.scheduler.has_work)
                if self.scheduler.has_work:
                    report = self.scheduler.step()
                    self.steps.append(report)
                    self._publish(report)
        except BaseException as exc:  # noqa: BLE001 - every waiting caller must hear of it
            self._error = exc
            for handle, _ in self._handles.values():
                handle._finish(None, exc)

    def _take_inbox(self, block: bool) -> bool:
        stop = False
        try:
            item = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
            while True:
                if item is _STOP:
                    stop = True
                elif isinstance(item[1], Future):
                    fn, future = item
                    try:
                        future.set_result(fn())
                    except Exception as exc:  # noqa: BLE001 - handed to the caller
                        future.set_exception(exc)
                else:
                    handle, req = item
                    self._handles[req.rid] = (handle, req)
                    self.scheduler.add_request(req)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return stop

    def _publish(self, report: StepReport) -> None:
        for rid in report.rids:
            handle, req = self._handles[rid]
            handle._push(req.output_ids[self._streamed.get(rid, 0):])
            self._streamed[rid] = len(req.output_ids)
        for rid in report.finished:
            handle, req = self._handles.pop(rid)
            self._streamed.pop(rid, None)
            _add_rates(req)
            handle._finish(req)


def _add_rates(req: Req) -> None:
    """decode_tps: tokens after the first over the time from the first token to the last."""
    m = req.metrics
    first = m["arrival"] + m["ttft"]
    span = m["finish_time"] - first
    m["decode_tps"] = (len(req.output_ids) - 1) / span if span > 0 else 0.0
    m["output_tokens"] = len(req.output_ids)


def fit_to_vocab(requests: list[Any], vocab_size: int, first_id: int = 1_000) -> list[list[int]]:
    """Prompts whose ids fit the model: unchanged when they already do, else every distinct id
    mapped one-to-one (first seen first) onto first_id, first_id+1, ..., so two prompts share
    exactly the prefixes they shared before (synthetic traces use ids up to 1,000,000).

    >>> fit_to_vocab([[5, 70_000, 9], [5, 70_000, 8]], 100, first_id=10)
    [[10, 11, 12], [10, 11, 13]]
    """
    prompts = [list(getattr(r, "token_ids", r)) for r in requests]
    if all(0 <= t < vocab_size for p in prompts for t in p):
        return prompts
    mapping: dict[int, int] = {}
    for p in prompts:
        for t in p:
            mapping.setdefault(t, first_id + len(mapping))
    if first_id + len(mapping) > vocab_size:
        raise ValueError(f"the trace has {len(mapping):,} distinct token ids; the model's "
                         f"vocabulary holds {vocab_size - first_id:,} past id {first_id}")
    return [[mapping[t] for t in p] for p in prompts]
