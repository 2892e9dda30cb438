"""The engine service: one background thread owns the caches and runs the scheduler loop.

Callers `submit` prompts from any thread through a thread-safe queue and get a `RequestHandle`
(engine/handles.py): streamed token ids, then the text and per-request metrics. The loop is
radix's `Scheduler` over a backend's runner (engine/backends.py: the model on its KV pool, or
the simulated runner), the radix tree (SGLang) on its pool, and vLLM's block-hash cache
shadowing the same requests; its KV events (BlockStored, BlockRemoved,
AllBlocksCleared) go out as one batch per step that has any, as vLLM's scheduler publishes them.
It cannot be wedged: rids are unique, a request's own failure fails only it (logged, one line),
a dead loop fails every pending and later call at once with its cause (logged with its
traceback; `error` keeps it), `close()` answers every accepted request.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from engine.backends import Backend, ModelBackend, SimBackend
from engine.handles import (
    STOP,
    TOKENIZER_LOCK,
    RequestCancelled,
    RequestHandle,
    RequestResult,
    RidRegistry,
    StampedEvent,
    StampingSink,
    add_rates,
    drain_inbox,
    fail_queued,
    trim,
)
from engine.kv_publisher import BatchPublisher, KVTap
from engine.sampling import SamplingParams, build_req
from engine.vocab import fit_to_vocab
from radix.blocks.hashing import BlockHasher
from radix.blocks.kv_events import EventBatch
from radix.request import Req
from radix.runs.sim import BlockShadow
from radix.sched.scheduler import Scheduler, SchedulerConfig, StepReport, check_fits
from radix.tree.radix_cache import RadixCache

if TYPE_CHECKING:  # engine/hosttier.py is imported when the host tier is on
    from engine.hosttier import HostTierScheduler

log = logging.getLogger("engine.service")

__all__ = ["EngineService", "RequestHandle", "RequestResult", "RequestCancelled", "StampedEvent",
           "TOKENIZER_LOCK", "fit_to_vocab"]  # fit_to_vocab: engine/vocab.py, kept here too


class EngineService:
    """Owns a backend (runner, pool, clock), radix tree, block shadow and scheduler in one thread.

    `capacity_tokens` sizes the pool (and the shadow). `no_cache=True` disables the tree (every
    match empty, SGLang's --disable-radix-cache) and the block cache's caching. `page_size`
    is the tree's (matches and inserts in whole pages); the pool stays one slot per token.
    `kv_events` hears one `EventBatch` per step with KV events (rank unset: the publisher's).
    `max_history` bounds the finished requests, steps and lookups kept (a long-lived server).
    `hash_algo` is how the block cache hashes blocks (radix/blocks/hashing.py): the hashes its
    KV events carry.
    `backend(loaded, capacity_tokens, page_size)` builds what runs: `ModelBackend` (the model)
    or `engine.backends.simulated(step_s)` (no model: `loaded` needs only a tokenizer).
    `host_ratio` R turns on the host tier (engine/hosttier.py, SGLang's --hicache-ratio): the
    tree is radix/hosttier's HostTierCache with a host pool of R x capacity_tokens rows under
    `write_policy`, and requests run one at a time through it (`self.host_tier`, the scheduler).
    """

    def __init__(self, loaded: Any, capacity_tokens: int, *, no_cache: bool = False,
                 config: SchedulerConfig | None = None, block_size: int = 16, page_size: int = 1,
                 max_events: int = 200_000,
                 listener: Callable[[StampedEvent], None] | None = None,
                 kv_events: BatchPublisher | None = None,
                 max_history: int | None = None,
                 hash_algo: str | BlockHasher = "radixlens",
                 backend: Callable[..., Backend] = ModelBackend,
                 host_ratio: float | None = None, write_policy: str = "write_through") -> None:
        if host_ratio is not None and (no_cache or page_size != 1):
            raise ValueError("--host-ratio needs the prefix cache on, at page size 1 (as "
                             "`python -m radix simulate --host-ratio` runs)")
        self.loaded, self.tokenizer = loaded, loaded.tokenizer
        self.backend = backend(loaded, capacity_tokens, page_size)
        self.events: deque[StampedEvent] = deque(maxlen=max_events)
        self._events_lock = threading.Lock()
        sinks = {s: StampingSink(s, self.events, self._events_lock, listener)
                 for s in ("tree", "blocks", "scheduler")}
        self.kv_events, self._kv_pending = kv_events, []
        block_sink = KVTap(sinks["blocks"], self._kv_pending) if kv_events else sinks["blocks"]
        self.pool = self.backend.pool
        self.shadow = BlockShadow(capacity_tokens, block_size, enable_caching=not no_cache,
                                  sink=block_sink, hash_algo=hash_algo)
        self.runner = self.backend.runner
        self.host_tier: HostTierScheduler | None = None
        if host_ratio is None:
            # a sliding-window model's: SGLang's component tree (engine/backends.py)
            tree_class = getattr(self.backend, "tree_class", RadixCache)
            self.tree = tree_class(page_size=page_size, sink=sinks["tree"], disable=no_cache,
                                   allocator=self.pool)
            self.scheduler = Scheduler(self.runner, self.tree, self.pool, config,
                                       clock=self.backend.clock, sink=sinks["scheduler"],
                                       shadow=self.shadow,
                                       knobs=getattr(self.backend, "knobs", None))
        else:
            from engine.hosttier import build_host_tier
            from engine.kv_pool import KVPool

            if getattr(self.pool, "translate", None) is not None:
                self.backend.close()
                raise ValueError("the host tier copies one row per token and layer: a model "
                                 "with sliding-window layers keeps two pools (run it without "
                                 "--host-ratio)")
            if not isinstance(self.pool, KVPool) and not isinstance(self.backend, SimBackend):
                self.backend.close()
                raise ValueError("the host tier copies KV rows in this process: it needs the "
                                 "model's own KVPool (ModelBackend) or the simulated backend")

            self.host_tier = self.scheduler = build_host_tier(
                self.pool, self.runner, host_ratio, write_policy=write_policy,
                sink=sinks["tree"], clock=self.backend.clock, shadow=self.shadow)
            self.tree = self.host_tier.tree_cache
        self.max_history = max_history
        self.steps: deque[StepReport] = deque(maxlen=max_history)
        self.max_context = self.backend.max_context
        self.eos_ids = self.backend.eos_ids
        self._inbox: queue.Queue = queue.Queue()
        self._handles: dict[str, tuple[RequestHandle, Req]] = {}
        self._streamed: dict[str, int] = {}  # rid -> output tokens already pushed to its handle
        self._lock = threading.Lock()  # orders submit/call against close and the loop's end
        self._closed = False  # no new work accepted
        self._ended = False  # the loop has returned (inbox no longer read)
        self._error: BaseException | None = None  # why the loop died
        self._rids = RidRegistry()
        self._thread = threading.Thread(target=self._loop, name="radixlens-engine", daemon=True)
        self._thread.start()

    # --- callers' side (any thread) -------------------------------------------------------
    def submit(self, prompt: str | list[int], max_new_tokens: int = 16, *,
               rid: str | None = None, chat: bool = False, extra_key: str | None = None,
               cache_salt: str | None = None, priority: int = 0,
               sampling: SamplingParams | None = None,
               listener: Callable[[list[int] | None], None] | None = None,
               forced_output: list[int] | None = None) -> RequestHandle:
        """Queues a request: token ids, raw text, or (chat=True) one user message.

        `extra_key` and `cache_salt` are namespaces: requests share KV only within one. Without
        `sampling` the request is greedy and runs to max_new_tokens (as a benchmark's
        ignore_eos); with it, it stops as a server does (engine/sampling.py). Raises ValueError
        for a bad or duplicate rid, a prompt past the vocabulary or the context length, and
        RuntimeError once the service is closed or its loop died (with the cause).
        `forced_output` (the host tier only): output tokens emitted in place of the sampled
        ones, one per step while any are left (teacher forcing; `engine run --as-simulate`).
        """
        self._check_open()
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if rid is not None and (not isinstance(rid, str) or not rid):
            raise ValueError(f"rid must be a non-empty string, got {rid!r}")
        token_ids = self.encode(prompt, chat) if isinstance(prompt, str) else list(prompt)
        vocab = self.backend.vocab_size
        if not token_ids or min(token_ids) < 0 or (vocab is not None and max(token_ids) >= vocab):
            raise ValueError(f"prompt token ids must be non-empty and in [0, {vocab or 'any'})")
        self.check_context(len(token_ids), max_new_tokens)
        if forced_output and (self.host_tier is None or min(forced_output) < 0 or (
                vocab is not None and max(forced_output) >= vocab)):
            raise ValueError("forced_output needs the host tier (host_ratio) and token ids in "
                             f"[0, {vocab or 'any'})")
        req = build_req(token_ids, max_new_tokens, sampling, self.eos_ids, self._detokenize,
                        extra_key=extra_key, cache_salt=cache_salt, priority=priority)
        req.arrival = self.backend.clock()  # the scheduler's clock (simulated: its seconds)
        # here, not on the engine thread (it reads only the pools' sizes)
        check = getattr(self.scheduler, "check_request", None)
        if check is not None:
            check(req)
        else:
            check_fits(req, self.pool.size, self.tree.page_size)
        with self._lock:
            self._check_open()
            req.rid = self._rids.claim(rid)
            handle = RequestHandle(req.rid, self.tokenizer, listener)
            if forced_output:
                self.host_tier.forced[req.rid] = list(forced_output)
            self.backend.accepted(req)
            self._inbox.put((handle, req))
        return handle

    def check_context(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """ValueError with the figures when prompt + new tokens pass the model's context."""
        if self.max_context is not None and prompt_tokens + max_new_tokens > self.max_context:
            raise ValueError(
                f"this model's maximum context length is {self.max_context:,} tokens; the "
                f"request needs {prompt_tokens + max_new_tokens:,} ({prompt_tokens:,} in the "
                f"prompt, {max_new_tokens:,} new)")

    def encode(self, text: str, chat: bool = False) -> list[int]:
        with TOKENIZER_LOCK:
            if chat:
                return list(self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": text}], add_generation_prompt=True,
                    tokenize=True, return_dict=True)["input_ids"])
            return list(self.tokenizer(text)["input_ids"])

    def call(self, fn: Callable[[], Any], timeout: float | None = 60.0) -> Any:
        """Runs `fn` on the engine thread between two steps (e.g. a tree snapshot)."""
        return self.post(fn).result(timeout)

    def post(self, fn: Callable[[], Any]) -> Future:
        """Queues `fn` for the engine thread (between two steps) without waiting: its Future."""
        future: Future = Future()
        with self._lock:
            self._raise_if_dead()
            if self._ended:
                raise RuntimeError("this engine service is closed; start a new one")
            self._inbox.put((fn, future))
        return future

    def snapshot_blocks(self) -> Future:
        """A Future of vLLM's block pool (the shadow) as plain data, taken between two steps."""
        return self.post(self.shadow.manager.snapshot)

    def snapshot(self) -> Any:  # the tree's, taken on the engine thread
        return self.call(self.tree.snapshot)

    def reset_prefix_cache(self) -> bool:
        """vLLM's reset_prefix_cache (AllBlocksCleared) and the tree emptied, when idle; False
        (nothing changed) while a request is queued or running."""
        def reset() -> bool:
            if self.scheduler.has_work or not self.shadow.manager.reset_prefix_cache():
                return False
            if self.host_tier is not None:
                self.host_tier.clear()
                return True
            self.tree.evict(self.tree.evictable_size())  # frees the tree's slots
            return True
        return self.call(reset)

    def close(self, timeout: float | None = None, *, cancel: bool = False) -> None:
        """Stops taking work and stops the thread: queued and running requests finish first,
        or with cancel=True each gets RequestCancelled. Joins the thread (up to `timeout`);
        raises the engine's error if its loop died."""
        with self._lock:
            if not self._closed or cancel:
                self._inbox.put((STOP, cancel))
            self._closed = True
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._raise_if_dead()

    @property
    def alive(self) -> bool:  # the engine thread runs
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:  # why the loop died (None: it did not)
        return self._error

    def __enter__(self) -> EngineService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _raise_if_dead(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the engine loop died: {self._error!r}") from self._error

    def _check_open(self) -> None:
        self._raise_if_dead()
        if self._closed:
            raise RuntimeError("this engine service is closed; start a new one")

    def _detokenize(self, token_ids: list[int]) -> str:
        with TOKENIZER_LOCK:
            return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    # --- the engine thread ----------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - every waiting caller must hear of it
            log.error("the engine loop died (%d requests held): %s: %s", len(self._handles),
                      type(exc).__name__, exc, exc_info=exc)
            with self._lock:
                self._error = exc
            self._answer_all(exc)
        finally:
            with self._lock:
                self._ended = True
            self._answer_all(RuntimeError("this engine service is closed; start a new one"))
            self.backend.close()

    def _run(self) -> None:
        stopping = False
        wake = threading.Event()  # never set: a pause between steps that is not a sleep call
        while True:
            # subtle: block on the inbox only while idle and not stopping: the stop request
            # may already have been taken, and nothing else would wake the thread
            stop = drain_inbox(self._inbox, not (stopping or self.scheduler.has_work), self._admit)
            if stop:  # cancel
                self._answer_all(None)
                return
            stopping |= stop is not None
            if stopping and not self.scheduler.has_work:
                return
            if self.scheduler.has_work:
                report = self.scheduler.step()
                self._flush_kv()  # before answering: a router reading the events sees them
                self._publish(report)
                if self.backend.step_s:
                    wake.wait(self.backend.step_s)
            else:
                self._flush_kv()

    def _admit(self, handle: RequestHandle, req: Req) -> None:
        try:
            self.scheduler.add_request(req)
        except Exception as exc:  # noqa: BLE001 - this request fails, not the loop
            _failed(req.rid, "admitting it", exc)
            self.backend.finished(req.rid)
            handle._finish(None, exc)
            return
        self._handles[req.rid] = (handle, req)

    def _flush_kv(self) -> None:
        if self._kv_pending:
            batch = EventBatch(time.time(), tuple(self._kv_pending), None)
            self._kv_pending.clear()
            self.kv_events.publish(batch)

    def _publish(self, report: StepReport) -> None:
        self.steps.append(report)
        for rid in report.rids:
            handle, req = self._handles[rid]
            try:
                handle._push(req.output_ids[self._streamed.get(rid, 0):])
            except Exception as exc:  # noqa: BLE001 - e.g. a listener whose client left
                _failed(rid, "streaming its tokens", exc)
                handle._finish(None, exc)
            self._streamed[rid] = len(req.output_ids)
        for rid in report.finished:
            handle, req = self._handles.pop(rid)
            if getattr(req, "error", None) is not None:  # its sampling or stop check failed
                _failed(rid, "running it", req.error)
            self._streamed.pop(rid, None)
            self.backend.finished(rid)
            add_rates(req)
            handle._finish(req)
        if self.max_history is not None:
            trim(self.scheduler.finished, self.max_history)
            trim(self.shadow.manager.lookups, self.max_history)

    def _answer_all(self, error: BaseException | None) -> None:
        """Fails every request the loop holds and everything still queued: with `error`, or
        RequestCancelled when it is None. Queued calls get the error too."""
        for rid, (handle, _) in list(self._handles.items()):
            self.backend.finished(rid)
            handle._finish(None, error or RequestCancelled(
                f"request {rid} cancelled: the engine service closed"))
        self._handles.clear()
        fail_queued(self._inbox, error or RequestCancelled("cancelled: the engine service closed"))


def _failed(rid: str, doing: str, exc: BaseException) -> None:
    """One log line for a request that failed alone (its client hears the error)."""
    log.warning("request %s failed while %s: %s: %s", rid, doing, type(exc).__name__, exc)
