"""The subscriber: ZMQ sockets to one or more KV-event publishers, each feeding its `Stream`.

Per publisher a SUB socket (live batches, topic prefix filter) and, when its replay endpoint is
known, a DEALER that asks the ROUTER for missed batches (wire.py). `Watcher.poll()` reads what
arrived, without threads (the CLI loops on it; the page's session runs it in a thread).
Replays are synchronous; `replay_timeout` is an idle timeout between an answer's messages; a
replay socket that goes quiet leaves the view unknown or incomplete, says why, and is not asked
again for REPLAY_BACKOFF_S (its gaps are lost at once meanwhile). `deadline` (time.monotonic():
the CLI's --duration) bounds every wait. Frames past `max_frame_bytes` are refused by ZMQ, which
then drops the connection for good; the watcher connects again (`reconnects`). Sockets queue
`rcv_hwm` messages at most. Malformed frames are counted per publisher, never raised.
`Endpoint` specs: `PUB` or `PUB,REPLAY`; `expand_dp` adds ranks as vLLM offsets ports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import zmq
from zmq.utils.monitor import recv_monitor_message

from radix.watch.stream import Sink, Status, Stream
from radix.watch.wire import (
    FrameError,
    Message,
    connectable,
    offset_endpoint_port,
    parse_pub,
    parse_replay,
    replay_request,
)

MAX_REPLAY_ROUNDS = 4  # replays tried for one gap before its seqs count as lost
MAX_MESSAGES_PER_POLL = 10_000  # per socket, so one busy publisher cannot starve the others
MAX_REPLAY_MESSAGES = 1_000_000  # one answer past this is not a replay buffer (vLLM's: 10,000)
MAX_FRAME_BYTES = 64 * 2**20  # one frame (a batch's payload); larger ones are refused by ZMQ
RCV_HWM = 10_000  # messages each socket queues before ZMQ drops (PUB) or blocks (replay)
REPLAY_BACKOFF_S = 30.0  # a replay socket that went quiet is not asked again for this long


class Endpoint(NamedTuple):
    pub: str  # where the PUB socket is (tcp://host:port)
    replay: str | None  # its ROUTER, if any

    @property
    def name(self) -> str:
        return self.pub


def parse_endpoint(spec: str) -> Endpoint:
    """`tcp://h:5557` or `tcp://h:5557,tcp://h:5558` (PUB, then replay); `*` means this host.

    >>> parse_endpoint("tcp://*:5557,tcp://*:5558")
    Endpoint(pub='tcp://127.0.0.1:5557', replay='tcp://127.0.0.1:5558')
    """
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"endpoint {spec!r}: expected PUB or PUB,REPLAY")
    for p in parts:
        if not p.startswith(("tcp://", "ipc://", "inproc://")):
            raise ValueError(f"endpoint {p!r}: expected tcp://HOST:PORT, ipc:// or inproc://")
    return Endpoint(connectable(parts[0]), connectable(parts[1]) if len(parts) == 2 else None)


def expand_dp(endpoints: Sequence[Endpoint], dp: int) -> list[Endpoint]:
    """Each endpoint for ranks 0..dp-1, ports offset by the rank (PUB and replay alike).

    >>> [e.pub for e in expand_dp([parse_endpoint("tcp://h:5557,tcp://h:5600")], 2)]
    ['tcp://h:5557', 'tcp://h:5558']
    """
    if dp < 1:
        raise ValueError(f"--dp must be >= 1, got {dp}")
    return [Endpoint(offset_endpoint_port(e.pub, r), offset_endpoint_port(e.replay, r))
            for e in endpoints for r in range(dp)]


class Watcher:
    """Subscribes to every endpoint at once; `poll` applies what arrived, `streams` hold the
    views. Call `close()` (or use `with`) to release the sockets."""

    def __init__(self, endpoints: Sequence[Endpoint], *, topic: str = "",
                 replay_timeout: float = 2.0, medium: str | None = None,
                 sink: Sink | None = None, clock: Callable[[], float] = time.time,
                 max_frame_bytes: int = MAX_FRAME_BYTES, rcv_hwm: int = RCV_HWM,
                 deadline: float | None = None) -> None:
        if not endpoints:
            raise ValueError("no endpoint to watch")
        names = [e.name for e in endpoints]
        if len(set(names)) != len(names):
            raise ValueError("an endpoint is given twice")
        if max_frame_bytes < 1 or rcv_hwm < 1:
            raise ValueError("max_frame_bytes and rcv_hwm must be >= 1")
        self.endpoints = list(endpoints)
        self.replay_timeout, self.clock = replay_timeout, clock
        self.deadline = deadline  # time.monotonic() past which nothing waits (None: never)
        self.max_frame_bytes, self.rcv_hwm = max_frame_bytes, rcv_hwm
        self._ctx = zmq.Context()
        self.streams = [Stream(e.name, medium, sink) for e in endpoints]
        self._subs: list[zmq.Socket] = []
        self._dealers: list[zmq.Socket | None] = [None] * len(endpoints)
        self._quiet_until = [0.0] * len(endpoints)  # no replay asked before (monotonic)
        self._poller = zmq.Poller()
        self._monitors: list[zmq.Socket] = []
        self.reconnects = [0] * len(endpoints)  # PUB connections dropped and made again
        for e in endpoints:
            sub = self._socket(zmq.SUB, e.pub)
            sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
            self._monitors.append(sub.get_monitor_socket(zmq.EVENT_DISCONNECTED))
            sub.connect(e.pub)
            self._poller.register(sub, zmq.POLLIN)
            self._subs.append(sub)
        self._started = False

    def _socket(self, kind: int, endpoint: str) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.RCVHWM, self.rcv_hwm)  # past it PUB drops: a gap, replayed
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IPV6, int("[" in endpoint))
        return sock

    def left(self) -> float:
        """Seconds until the deadline (inf without one; 0 once past)."""
        return float("inf") if self.deadline is None else max(
            0.0, self.deadline - time.monotonic())

    def start(self) -> None:
        """Catches every stream up through its replay socket (from seq 0), asking even one
        that went quiet lately."""
        self._started = True
        self._quiet_until = [0.0] * len(self.endpoints)
        for i, stream in enumerate(self.streams):
            self._repair(i, stream.start())

    def poll(self, timeout: float = 0.1) -> int:
        """Waits up to `timeout` s (never past the deadline) for batches, applies every one
        that arrived; returns how many messages were read."""
        if not self._started:
            self.start()
        self._reconnect_dropped()
        ready = dict(self._poller.poll(int(min(timeout, self.left()) * 1000)))
        read = 0
        for i, sub in enumerate(self._subs):
            if sub not in ready:
                continue
            for _ in range(MAX_MESSAGES_PER_POLL):
                if not self.left():
                    return read
                try:
                    frames = sub.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                read += 1
                self._on_frames(i, frames)
        return read

    def status(self) -> list[Status]:
        return [s.status() for s in self.streams]

    def close(self) -> None:
        """Closes every socket and the context; a second call does nothing (a session registry's
        sweep may close a watcher its page already closed)."""
        if self._ctx.closed:
            return
        for sub in self._subs:
            sub.disable_monitor()
        for sock in [*self._monitors, *self._subs, *(d for d in self._dealers if d is not None)]:
            sock.close(linger=0)
        self._dealers = [None] * len(self.endpoints)
        self._ctx.term()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- inside ---------------------------------------------------------------------------
    def _reconnect_dropped(self) -> None:
        """Connects again each PUB whose connection dropped. subtle: ZMQ reconnects by itself
        after a network error but not after a protocol error (a frame past MAXMSGSIZE); the
        disconnect first drops a reconnect ZMQ may have pending, so there is one connection."""
        for i, monitor in enumerate(self._monitors):
            dropped = False
            while monitor.poll(0):
                dropped |= recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
            if dropped:
                pub, sub = self.endpoints[i].pub, self._subs[i]
                try:
                    sub.disconnect(pub)
                except zmq.ZMQError:
                    pass
                sub.connect(pub)
                self.reconnects[i] += 1

    def _on_frames(self, i: int, frames: list[bytes]) -> None:
        stream = self.streams[i]
        try:
            msg = parse_pub(frames)
        except FrameError as exc:
            stream.malformed(f"PUB frame: {exc}")
            return
        start = stream.on_live(msg, self.clock())
        if start is not None:
            self._repair(i, start)

    def _repair(self, i: int, start: int | None) -> None:
        stream = self.streams[i]
        for _ in range(MAX_REPLAY_ROUNDS):
            if start is None:
                return
            if not self.left():
                stream.give_up(self.clock(), "the watch ended (--duration) before its replay")
                return
            items, why = self._replay(i, start)
            start = stream.on_replay(items, self.clock(), why)
        stream.give_up(self.clock(), f"{MAX_REPLAY_ROUNDS} replays did not close the gap")

    def _replay(self, i: int, start: int) -> tuple[list[Message] | None, str]:
        """(every buffered batch from `start` on, ""), or (None, why): no replay socket, or
        the answer stopped for `replay_timeout` s before its end marker (the socket is then
        dropped, so a late answer cannot be misread)."""
        endpoint, stream = self.endpoints[i], self.streams[i]
        if endpoint.replay is None:
            return None, "no replay endpoint to catch up from"
        if not self.left():
            return None, "the watch ended (--duration) before a replay"
        if time.monotonic() < self._quiet_until[i]:
            return None, (f"the replay socket went quiet; not asked again for "
                          f"{self._quiet_until[i] - time.monotonic():.0f} s")
        sock = self._dealers[i]
        if sock is None:
            sock = self._dealers[i] = self._socket(zmq.DEALER, endpoint.replay)
            sock.connect(endpoint.replay)
        sock.send_multipart(replay_request(start))
        items: list[Message] = []
        read = 0
        while read < MAX_REPLAY_MESSAGES and sock.poll(self._idle_ms()):  # subtle: the wait
            read += 1  # restarts with every message (an idle timeout): a flood is capped by count
            try:
                msg = parse_replay(sock.recv_multipart())
            except FrameError as exc:
                stream.malformed(f"replay frame: {exc}")
                continue
            if msg is None:
                return items, ""
            items.append(msg)
        sock.close(linger=0)
        self._dealers[i] = None
        if read >= MAX_REPLAY_MESSAGES:
            return None, f"the replay sent over {MAX_REPLAY_MESSAGES:,} messages without its end"
        if not self.left():
            return None, "the watch ended (--duration) during a replay"
        self._quiet_until[i] = time.monotonic() + REPLAY_BACKOFF_S
        return None, (f"the replay went quiet for {self.replay_timeout:g} s after {len(items):,} "
                      "batches, before its end")

    def _idle_ms(self) -> int:
        """How long a replay may wait for its next message: `replay_timeout`, cut at the
        deadline."""
        return int(min(self.replay_timeout, self.left()) * 1000) + (self.left() > 0)
