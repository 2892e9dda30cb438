"""A KV-event publisher speaking vLLM 0.33's ZmqEventPublisher protocol (written anew, not copied).

`publish(batch)` queues an EventBatch (its data_parallel_rank set to the publisher's when unset);
a daemon thread encodes it (radix/blocks/kv_events.py) and sends `(topic, seq, payload)` on a
PUB socket, seq counting from 0, and keeps the last `buffer_steps` payloads; a ROUTER answers
replay requests from them, then sends the end marker (radix/watch/wire.py). Endpoints of rank r
add r to the port; port 0 binds a free port (read `endpoint` after construction). Bind or
connect: `bind=None` follows vLLM 0.33 (`*`, `::`, ipc:// and inproc:// bind; a concrete host
such as tcp://127.0.0.1:5557 is *connected to*, for a proxy that binds there); `bind=True` binds
whatever is named, as SGLang's `bind` option does (`engine serve` passes it). The replay ROUTER
always binds, as in both.
"""

from __future__ import annotations

import errno
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import zmq

from radix.blocks.kv_events import EventBatch, encode_batch
from radix.events import AllBlocksCleared, BlockRemoved, BlockStored, Event
from radix.watch.wire import END_SEQ, offset_endpoint_port, seq_bytes

DEFAULT_ENDPOINT = "tcp://*:5557"
REBIND_SECONDS = 2.0  # how long a bind waits for a just-closed publisher to let go of its port


class BatchPublisher(Protocol):
    """Anything that takes a step's batch: a ZmqEventPublisher, the cluster's tee."""

    def publish(self, batch: EventBatch) -> None: ...


class KVTap:
    """A block-cache sink that passes every event on and keeps the KV events (vLLM's three)
    in `pending`, for the engine to publish as one batch per step."""

    def __init__(self, inner: Any, pending: list[Event]) -> None:
        self.inner, self.pending = inner, pending

    def emit(self, event: Event) -> None:
        if isinstance(event, BlockStored | BlockRemoved | AllBlocksCleared):
            self.pending.append(event)
        self.inner.emit(event)


def _binds(endpoint: str) -> bool:
    """vLLM's rule for the PUB socket (ZmqEventPublisher._is_bind_endpoint).

    >>> _binds("tcp://*:5557"), _binds("tcp://127.0.0.1:5557"), _binds("ipc:///tmp/kv")
    (True, False, True)
    """
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqEventPublisher:
    """PUB + ROUTER replay for one data-parallel rank; vLLM's constructor arguments, plus
    SGLang's `bind` (None: vLLM's rule by the endpoint's form; True: bind; False: connect)."""

    def __init__(self, data_parallel_rank: int = 0, endpoint: str = DEFAULT_ENDPOINT,
                 replay_endpoint: str | None = None, buffer_steps: int = 10_000,
                 hwm: int = 100_000, max_queue_size: int = 100_000, topic: str = "",
                 encode: Callable[[EventBatch], bytes] = encode_batch,
                 context: zmq.Context | None = None, bind: bool | None = None) -> None:
        if buffer_steps < 1:
            raise ValueError(f"buffer_steps must be >= 1, got {buffer_steps}")
        self.rank = data_parallel_rank
        self._encode = encode
        self._topic = topic.encode("utf-8")
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._ctx = context or zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = offset_endpoint_port(endpoint, data_parallel_rank)
        self.binds = _binds(self.endpoint) if bind is None else bind  # False: PUB connects
        if "[" in self.endpoint:  # an IPv6 address, tcp://[::1]:5557
            self._pub.setsockopt(zmq.IPV6, 1)
        if self.binds:
            self.endpoint = _bind(self._pub, self.endpoint)
        else:
            self._pub.connect(self.endpoint)
        self._replay: zmq.Socket | None = None
        self.replay_endpoint = offset_endpoint_port(replay_endpoint, data_parallel_rank)
        if self.replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))  # a whole replay fits
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.setsockopt(zmq.IPV6, int("[" in self.replay_endpoint))
            self.replay_endpoint = _bind(self._replay, self.replay_endpoint)
        self.num_published = 0
        self._running = True
        self._thread = threading.Thread(target=self._run, name=f"kv-publisher-{self.rank}",
                                        daemon=True)
        self._thread.start()

    def publish(self, batch: EventBatch) -> None:
        if not self._running:
            raise RuntimeError("the publisher is closed")
        if batch.data_parallel_rank is None:
            batch = EventBatch(batch.ts, batch.events, self.rank)
        self._queue.put(batch)

    def close(self, timeout: float = 1.0) -> None:
        """Sends what is queued (up to `timeout`), then closes the sockets."""
        if not self._running:
            return
        self._running = False
        self._queue.put(None)
        self._thread.join(timeout)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)

    def _run(self) -> None:
        seq = 0
        while True:
            if self._replay is not None:
                while self._replay.poll(0):
                    self._serve_replay()
            try:
                batch = self._queue.get(timeout=0.02)
            except queue.Empty:
                if not self._running:
                    return
                continue
            if batch is None:
                return
            payload = self._encode(batch)
            self._send(seq, payload)
            self._buffer.append((seq, payload))
            self.num_published += 1
            seq += 1

    def _send(self, seq: int, payload: bytes) -> None:
        """One PUB message (tests override it to lose a batch on purpose)."""
        self._pub.send_multipart((self._topic, seq_bytes(seq), payload))

    def _serve_replay(self) -> None:
        frames = self._replay.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:
            return  # not a replay request (vLLM logs and ignores it too)
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= first:
                self._replay.send_multipart((client, b"", self._topic, seq_bytes(seq), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))


def _bind(sock: zmq.Socket, endpoint: str) -> str:
    """Binds; a tcp port 0 takes a free port. Returns the bound endpoint (host as given)."""
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        base = endpoint[: -len(":0")]
        port = sock.bind_to_random_port(base)
        return f"{base}:{port}"
    # subtle: a publisher closed a moment ago (an engine restarted on the same port) may still
    # hold the port while libzmq's I/O thread tears its socket down: retry for a short while
    deadline = time.monotonic() + REBIND_SECONDS
    while True:
        try:
            sock.bind(endpoint)
            return endpoint
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
