"""What a caller of the engine service holds: a request's handle, its result, stamped events.

`RequestHandle` streams token ids as the engine thread produces them and ends with a
`RequestResult` (text cut at a stop string, finish_reason, metrics) or an error: the request's
own, `RequestCancelled` when the service closed first, or the loop's cause when it died. A
listener (the HTTP server's) may hear each chunk on the engine thread; a listener that raises
fails its own request, never the loop. `StampingSink` stamps cache events with rid and wall time.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple

from radix.events import Event, StepEnded, StepStarted
from radix.request import Req

_DONE = object()
_GENERATED = re.compile(r"req-([1-9][0-9]*)")
# subtle: HF fast tokenizers are not safe to use from two threads at once, and one loaded model
# (with its tokenizer) is shared by every service in the process (the app's sessions, the
# server's replicas), so the lock is process-wide, not per service.
TOKENIZER_LOCK = threading.Lock()


class RequestCancelled(RuntimeError):
    """The service closed (close(cancel=True)) before this request finished."""


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
    output_ids: list[int]  # generated token ids (an EOS that ended the request included)
    text: str  # their decoded text (served requests: special tokens skipped, stop string cut)
    metrics: dict[str, float]  # matched_tokens, prefilled_tokens, ttft, decode_tps, ...
    finish_reason: str = "length"  # "stop" (EOS, a stop id or string) or "length"


class RequestHandle:
    """What `submit` returns: iterate `tokens()` for the stream, or wait on `result()`.

    `listener(chunk)` (optional) runs on the engine thread with each list of new token ids,
    then once with None when the request ends (read `result()` then).
    """

    def __init__(self, rid: str, tokenizer: Any,
                 listener: Callable[[list[int] | None], None] | None = None) -> None:
        self.rid = rid
        self._tokenizer = tokenizer
        self._listener = listener
        self._stream: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._result: RequestResult | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

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
        if self._listener is not None and token_ids:
            self._listener(list(token_ids))

    def _finish(self, req: Req | None, error: BaseException | None = None,
                result: RequestResult | None = None) -> None:
        """Answers the handle once: a result from `req` (or `result`, made elsewhere: the
        engine process's, engine/procservice.py), or `error`. Never raises: a failing decode or
        listener becomes the request's error."""
        if self._done.is_set():
            return
        self._result = result if error is None else None
        if error is None and req is not None:
            try:
                self._result = _result_of(req, self._tokenizer)
            except Exception as exc:  # noqa: BLE001 - this request fails, not the engine
                error = exc
        self._error = error
        self._stream.put(_DONE)
        self._done.set()
        if self._listener is not None:
            try:
                self._listener(None)
            except Exception:  # noqa: BLE001, S110 - the caller is gone; nothing to tell
                pass


def _result_of(req: Req, tokenizer: Any) -> RequestResult:
    error = getattr(req, "error", None)
    if error is not None:
        raise error
    served = hasattr(req, "finish_reason")  # a ServedReq: special tokens (EOS) are not text
    with TOKENIZER_LOCK:
        text = tokenizer.decode(req.output_ids, skip_special_tokens=served)
    cut = getattr(req, "stop_text_len", None)
    if cut is not None:
        text = text[:cut]
    reason = getattr(req, "finish_reason", None) or "length"
    return RequestResult(req.rid, list(req.output_ids), text, req.metrics, reason)


class RidRegistry:
    """Request ids unique per service: generated ones are req-1, req-2, ..., skipping the
    callers' own; a caller's rid is refused if the service has seen it (generated or given).
    Keeps only the callers' rids (a server that lets ids be generated keeps nothing).
    Not thread-safe: the service calls it under its lock.

    >>> r = RidRegistry(); r.claim("req-2"), r.claim(None), r.claim(None)
    ('req-2', 'req-1', 'req-3')
    """

    def __init__(self) -> None:
        self._given: set[str] = set()
        self._last = 0

    def claim(self, rid: str | None) -> str:
        if rid is None:
            while True:
                self._last += 1
                rid = f"req-{self._last}"
                if rid not in self._given:
                    return rid
        generated = _GENERATED.fullmatch(rid)
        if rid in self._given or (generated and int(generated.group(1)) <= self._last):
            raise ValueError(f"rid {rid!r} is already used in this engine service")
        self._given.add(rid)
        return rid


def add_rates(req: Req) -> None:
    """decode_tps: tokens after the first over the time from the first token to the last."""
    m = req.metrics
    first = m["arrival"] + m["ttft"]
    span = m["finish_time"] - first
    m["decode_tps"] = (len(req.output_ids) - 1) / span if span > 0 else 0.0
    m["output_tokens"] = len(req.output_ids)


def trim(items: list, keep: int) -> None:
    """Cuts a history list back to its last `keep` once it holds twice as many (amortized)."""
    if len(items) > 2 * keep:
        del items[:-keep]


STOP = object()  # an inbox item (STOP, cancel): the service's close()


def drain_inbox(inbox: queue.Queue, block: bool, admit: Callable[[Any, Req], None]
                ) -> bool | None:
    """An engine service's inbox, on its loop's thread: takes everything queued (waiting for
    the first item when `block`), runs each queued call (fn, Future) into its Future, hands
    each (handle, req) to `admit`; returns the cancel flag of a (STOP, cancel) item, or None.

    >>> from concurrent.futures import Future
    >>> q, f, seen = queue.Queue(), Future(), []
    >>> q.put((lambda: 7, f)); q.put(("h", "r")); q.put((STOP, False))
    >>> drain_inbox(q, False, lambda h, r: seen.append((h, r))), f.result(), seen
    (False, 7, [('h', 'r')])
    """
    stop = None
    try:
        item = inbox.get() if block else inbox.get_nowait()
        while True:
            if item[0] is STOP:
                stop = bool(stop) or item[1]
            elif isinstance(item[1], Future):
                fn, future = item
                try:
                    future.set_result(fn())
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
            else:
                admit(*item)
            item = inbox.get_nowait()
    except queue.Empty:
        return stop


def fail_queued(inbox: queue.Queue, why: BaseException) -> None:
    """Empties an engine service's inbox after its loop ended: each queued call's Future and
    each queued request's handle fails with `why` (a STOP item is dropped)."""
    while True:
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            return
        if isinstance(item[1], Future):
            item[1].set_exception(why)
        elif item[0] is not STOP:
            item[0]._finish(None, why)

