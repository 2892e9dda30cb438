"""The whole engine service in a process of its own: the page's Python cannot slow its loop.

`ProcessService` is what the app's engines (Live, Classroom) run. A forward on a thread of the
Streamlit process is hundreds of short torch ops, each taking the GIL back behind a busy page
thread; moving only the forward out (an earlier backend, retired) left the scheduler, the caches
and the per-step Python there, and each step still waited. Here a child runs an `EngineService`
(loop, radix tree, KV pool, block shadow, model forward, sampling) and the parent keeps a proxy
with the calls the pages use: `submit` (a `RequestHandle` here, fed tokens and its result), the
stamped events handed to `listener` in the order the engine made them, `steps`, `snapshot_blocks`,
`close`. Everything crosses as plain picklable data (radix's events are frozen dataclasses); one
batched message carries whatever the child produced since the last. The weights are shared, not
copied, and on CPU the child forks from engine/remote.py's forkserver (`shipping`, `landed`): it
starts in about a second, not the ~30 s of a spawned child importing torch.
Leaves out: `call(fn)` (a function would have to cross) and the service's attributes (`tree`,
`pool`, `shadow` live in the child).
"""

from __future__ import annotations

import itertools
import os
import pickle
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from engine.backends import ModelBackend
from engine.handles import RequestHandle, StampedEvent
from engine.remote import START_TIMEOUT_S, landed, shipping
from engine.service import EngineService
from radix.runs.workers import bare_main
from radix.sched.scheduler import StepReport

ACK_TIMEOUT_S = 120.0  # a submit's round trip; the child answers between two torch ops


def portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a RuntimeError with its type and message."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - an exception class pickle cannot rebuild
        return RuntimeError(f"{type(exc).__name__}: {exc}")


# --- the child ------------------------------------------------------------------------------
class _RelayService(EngineService):
    """EngineService that also sends each step's report out (before its tokens are pushed)."""

    def __init__(self, out: queue.Queue, *args: Any, **kw: Any) -> None:
        self.out = out  # set before the loop's thread starts (in super().__init__)
        super().__init__(*args, **kw)

    def _publish(self, report: StepReport) -> None:
        self.out.put(("step", report))
        super()._publish(report)


class _Relay:
    """One request's handle listener in the child: its chunks and its end go out keyed by the
    parent's sequence number. subtle: the end can come before `submit` returned the handle
    (a request the loop refuses at admission), so whichever of the two comes last sends it."""

    def __init__(self, seq: int, out: queue.Queue) -> None:
        self.seq, self.out = seq, out
        self.handle: RequestHandle | None = None
        self.ended = False
        self.lock = threading.Lock()

    def __call__(self, chunk: list[int] | None) -> None:
        if chunk is not None:
            self.out.put(("tokens", self.seq, chunk))
            return
        with self.lock:
            self.ended, handle = True, self.handle
        if handle is not None:
            self._send_end(handle)

    def attach(self, handle: RequestHandle) -> None:
        with self.lock:
            self.handle, ended = handle, self.ended
        if ended:
            self._send_end(handle)

    def _send_end(self, handle: RequestHandle) -> None:
        try:
            self.out.put(("done", self.seq, handle.result(timeout=0), None))
        except BaseException as exc:  # noqa: BLE001 - the request's own error, sent over
            self.out.put(("done", self.seq, None, portable(exc)))


def _send_all(conn: Any, out: queue.Queue) -> None:
    """The child's sender: everything queued since the last send goes as one list; None ends."""
    while True:
        batch, item = [], out.get()
        while item is not None:
            batch.append(item)
            try:
                item = out.get_nowait()
            except queue.Empty:
                break
        try:
            conn.send(batch)
        except (OSError, EOFError):  # the parent is gone
            return
        if item is None:
            return


def _child(conn: Any, loaded: Any, capacity_tokens: int, kw: dict, threads: int,
           backend: Any) -> None:
    """The child's main thread: builds the service, then runs the parent's commands until
    "close" or until the parent is gone (its end of the pipe closed: cancel and exit)."""
    torch.set_num_threads(threads)
    loaded = landed(loaded)
    out: queue.Queue = queue.Queue()
    sender = threading.Thread(target=_send_all, args=(conn, out), name="radixlens-send")
    sender.start()
    try:
        service = _RelayService(out, loaded, capacity_tokens, backend=backend,
                                listener=lambda e: out.put(("event", e)), **kw)
    except BaseException as exc:  # noqa: BLE001 - the parent raises it from its constructor
        out.put(("failed", portable(exc)))
        out.put(None)
        sender.join()
        return
    out.put(("ready",))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = ("close", True)
        if msg[0] == "submit":
            _submit(service, out, *msg[1:])
        elif msg[0] == "blocks":
            _blocks(service, out)
        elif msg[0] == "close":
            error = None
            try:
                service.close(cancel=msg[1])
            except BaseException as exc:  # noqa: BLE001 - the loop's death, told to the parent
                error = portable(exc)
            out.put(("closed", error))
            break
    out.put(None)
    sender.join()
    conn.close()  # the parent's reader ends now
    # subtle: a normal exit tears down torch and every module first, seconds on a busy machine,
    # and the parent kills a child that lingers; nothing here needs that teardown
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _submit(service: EngineService, out: queue.Queue, seq: int, prompt: Any,
            max_new_tokens: int, kw: dict) -> None:
    relay = _Relay(seq, out)
    try:
        handle = service.submit(prompt, max_new_tokens, listener=relay, **kw)
    except Exception as exc:  # noqa: BLE001 - a bad request: refused, the loop goes on
        out.put(("ack", seq, None, portable(exc)))
        return
    out.put(("ack", seq, handle.rid, None))
    relay.attach(handle)


def _blocks(service: EngineService, out: queue.Queue) -> None:
    def answer(future: Future) -> None:
        out.put(("blocks", None if future.exception() else future.result()))

    try:
        service.snapshot_blocks().add_done_callback(answer)
    except Exception:  # noqa: BLE001 - a closed or dead loop: no snapshot
        out.put(("blocks", None))


# --- the parent -----------------------------------------------------------------------------
class ProcessService:
    """EngineService's calls, with the service itself in a child process.

    Takes EngineService's arguments (`backend` must pickle: a class or a functools.partial,
    default ModelBackend), plus `threads`: the child's torch threads, by default one core
    fewer than the machine's (at least one), so the host process's Python keeps a core.
    `listener` runs here, on a reader thread, with each StampedEvent in the engine's order;
    a request's `listener` too, with its chunks. A bad request raises ValueError from `submit`
    and the loop goes on; `close()` stops the child (it exits; killed past `timeout`); a child
    that dies fails every pending and later call with its exit code.
    """

    def __init__(self, loaded: Any, capacity_tokens: int, *,
                 listener: Callable[[StampedEvent], None] | None = None,
                 threads: int | None = None, backend: Any = ModelBackend, **kw: Any) -> None:
        self.loaded, self.tokenizer, self.listener = loaded, loaded.tokenizer, listener
        self.steps: deque[StepReport] = deque(maxlen=kw.get("max_history"))
        self._handles: dict[int, RequestHandle] = {}  # seq -> the handle the caller holds
        self._acks: dict[int, Future] = {}  # seq -> (rid, error) once the child took it
        self._blocks: deque[Future] = deque()  # snapshot_blocks answers, oldest first
        self._seq = itertools.count(1)
        self._lock = threading.Lock()  # orders submit/close against the reader's end
        self._send_lock = threading.Lock()
        self._closed = False  # no new work accepted
        self._gone: BaseException | None = None  # why the child's stream ended
        self._close_error: BaseException | None = None  # the loop's death, told at close
        self._clean = False  # the child answered "close" (it did not just vanish)
        threads = threads or max(1, (os.cpu_count() or 2) - 1)
        ctx, shipped = shipping(loaded)  # forkserver and SharedWeights on CPU: a quick start
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_child, name="radixlens-engine", daemon=True,
                                   args=(child, shipped, capacity_tokens, kw, threads, backend))
        with bare_main():
            self.process.start()
        child.close()
        self._start()
        self._reader = threading.Thread(target=self._read, name="radixlens-engine-reader",
                                        daemon=True)
        self._reader.start()

    def _start(self) -> None:
        """Waits for the child's "ready" (the events its constructor made come first: they
        go to the listener) or "failed" (raised here)."""
        while True:
            if not self._conn.poll(START_TIMEOUT_S):
                self.process.kill()
                raise RuntimeError(f"the engine process did not start in "
                                   f"{START_TIMEOUT_S:.0f} s")
            try:
                batch = self._conn.recv()
            except EOFError:
                self.process.join(5)
                raise RuntimeError(f"the engine process exited at start (code "
                                   f"{self.process.exitcode})") from None
            for msg in batch:
                if msg[0] == "failed":
                    self.process.join(10)
                    raise msg[1]
                self._dispatch(msg)
            if any(msg[0] == "ready" for msg in batch):
                return

    # --- callers' side (any thread) -------------------------------------------------------
    def submit(self, prompt: str | list[int], max_new_tokens: int = 16, *,
               rid: str | None = None,
               listener: Callable[[list[int] | None], None] | None = None,
               **kw: Any) -> RequestHandle:
        """EngineService.submit, answered by the child: ValueError for a bad request (the
        loop goes on), RuntimeError once closed or gone."""
        seq, ack = next(self._seq), Future()
        handle = RequestHandle(rid or "", self.tokenizer, listener)
        with self._lock:
            self._check_open()
            self._handles[seq], self._acks[seq] = handle, ack
        self._send(("submit", seq, prompt, max_new_tokens, dict(kw, rid=rid)))
        try:
            handle.rid, error = ack.result(ACK_TIMEOUT_S)
        except TimeoutError:
            error = RuntimeError(f"the engine process did not answer in {ACK_TIMEOUT_S:.0f} s")
        if error is not None:
            with self._lock:
                self._handles.pop(seq, None)
            raise error
        return handle

    def snapshot_blocks(self) -> Future:
        """A Future of the block shadow's BlockPoolSnapshot (None if the loop had stopped)."""
        future: Future = Future()
        with self._lock:
            self._check_open()
            self._blocks.append(future)
        self._send(("blocks",))
        return future

    def close(self, timeout: float | None = None, *, cancel: bool = False) -> None:
        """Stops taking work and stops the child: queued and running requests finish first, or
        with cancel=True each gets RequestCancelled. Waits up to `timeout` for the child to
        exit, then kills it; raises the loop's error if it died. Idempotent."""
        with self._lock:
            tell = not self._closed or cancel
            self._closed = True
        if tell and self._gone is None:
            try:
                self._send(("close", cancel))
            except RuntimeError:
                pass
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout)
            if self._reader.is_alive():  # past the timeout: no orphan is left behind
                self.process.kill()
        self.process.join(5)
        if self.process.is_alive():  # a child wedged after its last message
            self.process.kill()
            self.process.join(5)
        if self._close_error is not None:
            raise RuntimeError(f"the engine loop died: {self._close_error!r}"
                               ) from self._close_error
        if not self._clean and self._gone is not None:
            raise self._gone

    @property
    def alive(self) -> bool:  # the child runs and its stream is read
        return self._reader.is_alive() and self.process.is_alive()

    def __enter__(self) -> ProcessService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this engine service is closed; start a new one")
        if self._gone is not None:
            raise RuntimeError(f"{self._gone}") from self._gone

    def _send(self, msg: tuple) -> None:
        try:
            with self._send_lock:
                self._conn.send(msg)
        except (OSError, ValueError) as exc:  # closed pipe: the reader fails what waits
            raise RuntimeError(f"the engine process is gone (exit code "
                               f"{self.process.exitcode})") from exc

    # --- the reader thread ----------------------------------------------------------------
    def _read(self) -> None:
        why: BaseException | None = None
        try:
            while True:
                for msg in self._conn.recv():
                    self._dispatch(msg)
        except (EOFError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - a listener failed: the service ends, as
            why = exc  # an EngineService whose listener raises on its loop's thread
        finally:
            if why is not None:
                self.process.kill()
            self.process.join(5)
            gone = RuntimeError(f"the engine process is gone (exit code "
                                f"{self.process.exitcode})" + (f": {why!r}" if why else ""))
            with self._lock:
                self._gone = gone
                handles, self._handles = list(self._handles.values()), {}
                acks, self._acks = list(self._acks.values()), {}
                blocks, self._blocks = list(self._blocks), deque()
            for handle in handles:
                handle._finish(None, gone)
            for future in acks + blocks:
                future.set_exception(gone)
            self._conn.close()

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "event":
            if self.listener is not None:
                self.listener(msg[1])
        elif kind == "step":
            self.steps.append(msg[1])
        elif kind == "tokens":
            handle = self._handles.get(msg[1])
            if handle is not None:
                try:
                    handle._push(msg[2])
                except Exception as exc:  # noqa: BLE001 - e.g. a listener whose client left
                    handle._finish(None, exc)
        elif kind == "done":
            with self._lock:
                handle = self._handles.pop(msg[1], None)
            if handle is not None:
                handle._finish(None, msg[3], result=msg[2])
        elif kind == "ack":
            with self._lock:
                ack = self._acks.pop(msg[1], None)
            if ack is not None:
                ack.set_result((msg[2], msg[3]))
        elif kind == "blocks":
            with self._lock:
                future = self._blocks.popleft() if self._blocks else None
            if future is not None:
                future.set_result(msg[1])
        elif kind == "ready":
            pass
        elif kind == "closed":
            self._clean, self._close_error = True, msg[1]
