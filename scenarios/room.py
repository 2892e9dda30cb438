"""A classroom room: one shared engine, students' prompts in, one shared view out.

A room has a code and a secret token that only the lecturer's session holds (both issued by
scenarios/classroom.py). Students `ask` prompts; they go to the room's one LiveSession
(scenarios/live.py: its engine, tree and block shadow). The lecturer may pause (prompts wait in
the room's queue), step (admit the next waiting prompt) and clear (the engine is cancelled and
closed, a fresh one starts). Every change (an engine event, a token, an action) raises `version`;
pages redraw only when it moved. Bounded: the queue per room and per student, the prompts kept,
text lengths. Leaves out: accounts (the token lives in one session).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scenarios.changes import Changes, RoomTree
from scenarios.live import LiveRequest, LiveSession

LECTURER = "lecturer"  # the lecturer's display name (students may not take it)
SYSTEM = "You are a helpful teaching assistant. Answer in one short sentence."
MakeSession = Callable[[RoomTree], LiveSession]  # a room's engine, listening with its tree


@dataclass(frozen=True)
class RoomLimits:
    max_rooms: int = 8  # rooms open at once in the process
    max_queue: int = 64  # prompts waiting or running in one room
    max_per_student: int = 3  # ... of one student
    max_asks: int = 200  # prompts a room keeps (the oldest answered ones go first)
    max_prompt_chars: int = 1_000  # one prompt
    max_name_chars: int = 32  # a student's display name
    idle_s: float = 2 * 3600.0  # a room no one has looked at for this long closes
    max_new_tokens: int = 8  # tokens each answer generates
    capacity_tokens: int = 4_096  # the room engine's KV pool

    def __post_init__(self) -> None:
        for name in ("max_rooms", "max_queue", "max_per_student", "max_asks",
                     "max_prompt_chars", "max_name_chars", "max_new_tokens", "capacity_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"RoomLimits.{name} must be >= 1, got {getattr(self, name)}")
        if self.idle_s <= 0:
            raise ValueError(f"RoomLimits.idle_s must be > 0, got {self.idle_s}")


def reserved_name(name: str) -> bool:
    """The lecturer's display name, which no student may take: 'Lecturer ', 'LECTURER'."""
    return " ".join(str(name).split()).casefold() == LECTURER.casefold()


class RoomError(ValueError):
    """A refused room action; the message is one line for the page."""


@dataclass
class Ask:
    """One student's prompt in a room."""

    student: str  # display name (shown, escaped)
    sid: str  # the asking browser session (never shown)
    text: str
    req: LiveRequest | None = None  # None while it waits in the room's queue
    cancelled: str | None = None  # why it was dropped before being answered

    @property
    def state(self) -> str:
        if self.cancelled:
            return "cancelled"
        if self.req is None:
            return "waiting"
        if self.req.error:
            return "failed"
        return "done" if self.req.metrics is not None else "running"


@dataclass
class Room:
    code: str
    token: str  # the lecturer's secret
    make_session: MakeSession
    limits: RoomLimits
    changes: Changes = field(default_factory=Changes)
    paused: bool = False
    asks: list[Ask] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic  # the registry's (idle rooms close by it)
    last_seen: float = 0.0
    closed: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self.last_seen = self.clock()
        self.session = self.make_session(RoomTree(self.changes))

    # --- everyone ---------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Raised by every change; `pump()` first to take in streamed tokens."""
        return self.changes.version

    def pump(self) -> int:
        """Takes in streamed tokens and answers (a change if any came); returns the version."""
        with self._lock:
            self.last_seen = self.clock()
            if self.closed:
                return self.version
            before = sum(len(r.output_ids) + (r.done and 1) for r in self.session.requests)
            self.session.poll()
            after = sum(len(r.output_ids) + (r.done and 1) for r in self.session.requests)
            if after != before:
                self.changes.mark()
            return self.version

    def ask(self, sid: str, name: str, text: str, token: str = "") -> Ask:
        """Queues a student's prompt (admitted now unless paused); RoomError when refused.
        The name "lecturer" (any case) is the lecturer's: only with the room's `token`."""
        name, text = " ".join(str(name).split()), str(text).strip()
        lim = self.limits
        if not name or len(name) > lim.max_name_chars:
            raise RoomError(f"a display name of 1 to {lim.max_name_chars} characters, please")
        if reserved_name(name) and not secrets.compare_digest(str(token), self.token):
            raise RoomError(f"{name!r} is the lecturer's name in the room; pick your own")
        if not text or len(text) > lim.max_prompt_chars:
            raise RoomError(f"a prompt of 1 to {lim.max_prompt_chars:,} characters, please")
        with self._lock:
            self._check_open()
            open_asks = [a for a in self.asks if a.state in ("waiting", "running")]
            if len(open_asks) >= lim.max_queue:
                raise RoomError(f"the room has {len(open_asks)} prompts in flight (at most "
                                f"{lim.max_queue}); wait for some answers")
            if sum(a.sid == sid for a in open_asks) >= lim.max_per_student:
                raise RoomError(f"you have {lim.max_per_student} prompts in flight already; "
                                "wait for an answer")
            ask = Ask(name, sid, text)
            self.asks.append(ask)
            self._trim()
            if not self.paused:
                self._admit(ask)
            self.changes.mark()
            return ask

    def mine(self, sid: str) -> list[Ask]:
        with self._lock:
            return [a for a in self.asks if a.sid == sid]

    def rows(self) -> list[Ask]:
        """The room's prompts, oldest first (a copy of the list)."""
        with self._lock:
            return list(self.asks)

    # --- the lecturer -----------------------------------------------------------------------
    def control(self, token: str, action: str) -> None:
        """pause, resume, step (admit the next waiting prompt) or clear; RoomError for a
        wrong token or action."""
        if not secrets.compare_digest(str(token), self.token):
            raise RoomError("only the lecturer who opened this room can control it")
        with self._lock:
            self._check_open()
            if action == "pause":
                self.paused = True
            elif action == "resume":
                self.paused = False
                for ask in [a for a in self.asks if a.state == "waiting"]:
                    self._admit(ask)
            elif action == "step":
                waiting = [a for a in self.asks if a.state == "waiting"]
                if not waiting:
                    raise RoomError("no prompt is waiting")
                self._admit(waiting[0])
            elif action == "clear":
                self._clear()
            else:
                raise RoomError(f"unknown action {action!r}")
            self.changes.mark()

    def close(self) -> None:
        """Cancels the engine's requests and stops its thread; the room answers no more."""
        with self._lock:
            self.closed = True
            self._stop_engine()
            self.changes.mark()

    # --- inside -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RoomError(f"room {self.code} has closed; ask the lecturer for a new code")

    def _admit(self, ask: Ask) -> None:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask.text}]
        try:
            ask.req = self.session.submit(ask.student, messages, self.limits.max_new_tokens)
        except (ValueError, RuntimeError) as exc:
            ask.cancelled = str(exc)

    def _trim(self) -> None:
        """Drops the oldest finished prompts past max_asks; the session forgets finished ones."""
        extra = len(self.asks) - self.limits.max_asks
        if extra > 0:
            ended = [id(a) for a in self.asks if a.state not in ("waiting", "running")]
            drop = set(ended[:extra])
            self.asks = [a for a in self.asks if id(a) not in drop]
        self.session.requests[:] = [r for r in self.session.requests if not r.done]

    def _clear(self) -> None:
        self._stop_engine()
        for ask in self.asks:
            if ask.state in ("waiting", "running"):
                ask.cancelled = "cleared by the lecturer"
        self.asks = []
        self.session = self.make_session(RoomTree(self.changes))

    def _stop_engine(self) -> None:
        service = self.session.service
        if service is not None:
            try:
                service.close(timeout=10.0, cancel=True)  # answers every request at once
            except Exception:  # noqa: BLE001 - its error already went to its handles
                pass
        self.session.close()
