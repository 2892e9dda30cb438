"""`engine serve`'s connections: a cap on how many are open, and a deadline for each request head.

uvicorn's own limits do not hold against idle clients: `limit_concurrency` counts idle
connections too (a flood of them then answers every request 503), and a connection that never
finishes its request head is never timed out (slowloris), so idle sockets pile up until
accept() fails for want of file descriptors and asyncio logs a traceback per try. Here,
`GuardedProtocol` (uvicorn's h11 protocol) keeps at most `max_connections` open (by default
what the open-files limit leaves room for, `default_limits`): a new one
closes the oldest connection with no request under way, or, when all are busy, is answered 503
and closed; a connection must complete each request head within `header_timeout_s` (after a
response, within uvicorn's keep-alive timeout + that). Each refusal is one log line, and
`GuardedServer` turns the event loop's accept errors into one line a second, not a traceback.
Leaves out: per-address limits, TLS.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import resource
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.admission import error_json

log = logging.getLogger("engine.connections")
DEFAULT_MAX_CONNECTIONS = 1_024  # open HTTP connections (--max-connections)
DEFAULT_BACKLOG = 2_048  # uvicorn's listen backlog
RESERVED_FDS = 256  # file descriptors kept for the model's files, ZMQ sockets, threads
HEADER_TIMEOUT_S = 10.0  # a request head must arrive within this (--header-timeout)
KEEP_ALIVE_S = 5  # uvicorn's timeout_keep_alive (its default)
_ACCEPT_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
         b"connection: close\r\ncontent-length: %d\r\n\r\n")


def default_limits(soft: int | None = None) -> tuple[int, int]:
    """(max_connections, backlog) that fit the open-files limit `soft` (this process's by
    default) less RESERVED_FDS. subtle: asyncio accepts up to `backlog` connections at a
    wake-up before a connection closed for room lets go of its descriptor, so both count.

    >>> default_limits(20_000), default_limits(1_024)
    ((1024, 2048), (384, 384))
    """
    if soft is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS, DEFAULT_BACKLOG
    room = soft - RESERVED_FDS
    backlog = max(16, min(DEFAULT_BACKLOG, room // 2))
    return max(16, min(DEFAULT_MAX_CONNECTIONS, room - backlog)), backlog


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and a request-head deadline (set on a
    subclass by `guarded`)."""

    max_connections = DEFAULT_MAX_CONNECTIONS
    header_timeout_s = HEADER_TIMEOUT_S
    _order = itertools.count()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.born, self._head_of = next(self._order), None
        self._timer = self.loop.call_later(self.header_timeout_s, self._head_late)
        open_now = [c for c in self.connections if not c.transport.is_closing()]
        if len(open_now) > self.max_connections:
            self._make_room(open_now)

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._head_of:  # a request began
            self._head_of = self.cycle
            self._timer.cancel()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._timer.cancel()
        self._timer = self.loop.call_later(self.config.timeout_keep_alive
                                           + self.header_timeout_s, self._head_late)

    @property
    def idle(self) -> bool:
        """No request under way (none yet, one arriving, or the last one answered)."""
        return self.cycle is None or self.cycle.response_complete

    def _make_room(self, open_now: list[GuardedProtocol]) -> None:
        idle = [c for c in open_now if c is not self and c.idle]
        if idle:
            oldest = min(idle, key=lambda c: c.born)
            log.warning("closed an idle connection from %s to admit one from %s: %d open, "
                        "the limit (--max-connections)", _peer(oldest), _peer(self),
                        self.max_connections)
            oldest.transport.close()
            return
        log.warning("refused a connection from %s: %d connections, all with a request under "
                    "way (--max-connections)", _peer(self), self.max_connections)
        body = error_json(f"this server holds {self.max_connections:,} connections, all busy:"
                          " try again", "ServiceUnavailableError", 503)
        self.transport.write(_BUSY % len(body) + body)
        self.transport.close()

    def _head_late(self) -> None:
        if self.transport.is_closing() or not self.idle:
            return
        log.warning("closed a connection from %s: no complete request head within %g s "
                    "(--header-timeout)", _peer(self), self.header_timeout_s)
        self.transport.close()


def _peer(protocol: H11Protocol) -> str:
    client = protocol.client
    return f"{client[0]}:{client[1]}" if client else "?"


def guarded(max_connections: int | None = None,
            header_timeout_s: float = HEADER_TIMEOUT_S) -> type[GuardedProtocol]:
    """A GuardedProtocol class with these limits (uvicorn.Config's `http=`)."""
    cap = default_limits()[0] if max_connections is None else max_connections
    if cap < 1 or not header_timeout_s > 0:
        raise ValueError("--max-connections must be >= 1 and --header-timeout > 0")
    return type("GuardedProtocol", (GuardedProtocol,),
                {"max_connections": cap, "header_timeout_s": header_timeout_s})


def guarded_config(app: Any, max_connections: int | None = None,
                   header_timeout_s: float = HEADER_TIMEOUT_S, **kw: Any) -> uvicorn.Config:
    """uvicorn's Config for `app` with the guarded protocol, its keep-alive timeout and a
    listen backlog that fits the open-files limit (`default_limits`; `backlog=` overrides).
    subtle: asyncio listens with the backlog again, so it is the kernel's queue as well: a
    small one drops SYNs in a flood (a client then waits a second per retry)."""
    kw.setdefault("log_level", "warning")
    kw.setdefault("backlog", default_limits()[1])
    return uvicorn.Config(app, http=guarded(max_connections, header_timeout_s),
                          timeout_keep_alive=KEEP_ALIVE_S, **kw)


class GuardedServer(uvicorn.Server):
    """uvicorn's Server whose event loop reports a failed accept() (out of file descriptors)
    in one line a second, with a count, instead of a traceback per try."""

    async def startup(self, sockets: Any = None) -> None:
        loop = asyncio.get_running_loop()
        said = [0.0, 0]  # when last logged, failures since

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            if not (isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS):
                loop.default_exception_handler(context)
                return
            said[1] += 1
            if time.monotonic() - said[0] >= 1.0:
                log.warning("could not accept connections (%d times): %s; lower "
                            "--max-connections or raise the open-files limit (ulimit -n)",
                            said[1], exc.strerror)
                said[:] = [time.monotonic(), 0]

        loop.set_exception_handler(handler)
        await super().startup(sockets)
