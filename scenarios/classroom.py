"""The process's classroom: open rooms by code, at most `max_rooms`, idle ones closed.

`ROOMS` is the one registry of the server process (as BUDGET is the one memory ledger): a
lecturer `open`s a room and gets its code and secret token; a student `get`s a room by the code
read off the projector (a wrong or expired code is one clear line). A room is found only by its
code, so a session sees no other room. `sweep` closes rooms no one has looked at for
`idle_s`. Engines: the real default model (`model_sessions`), or `sim_sessions` (the real
scheduler and caches, priced, no model: RADIXLENS_CLASSROOM_ENGINE=sim, and the tests).
Leaves out: several processes (rooms live in this process's memory).
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scenarios.live import LiveSession, own_process_service, sim_service
from scenarios.room import MakeSession, Room, RoomError, RoomLimits

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read off a projector
CODE_LEN = 5
ENGINE = os.environ.get("RADIXLENS_CLASSROOM_ENGINE", "model")  # "model" or "sim"


def new_code(taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A fresh code: CODE_LEN characters of ALPHABET (31**5 = 28,629,151 codes), not `taken`."""
    while True:
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LEN))
        if code not in taken:
            return code


def normal_code(text: str) -> str:
    """What a student typed, as a code: spaces dropped, upper case.

    >>> normal_code(" ab c2d ")
    'ABC2D'
    """
    return "".join(str(text).split()).upper()


class Classroom:
    """Thread-safe: code -> Room."""

    def __init__(self, limits: RoomLimits | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits or RoomLimits()
        self.clock = clock
        self._lock = threading.Lock()
        self._rooms: dict[str, Room] = {}

    def open(self, make_session: MakeSession) -> Room:
        """A new room with its own engine; RoomError when the server holds max_rooms."""
        self.sweep()
        with self._lock:
            if len(self._rooms) >= self.limits.max_rooms:
                raise RoomError(f"the server holds {len(self._rooms)} rooms (at most "
                                f"{self.limits.max_rooms}); close one or try again later")
            code = new_code(set(self._rooms))
            # reserved under the lock; the engine starts outside it (it may take a moment)
            self._rooms[code] = None  # type: ignore[assignment]
        try:
            room = Room(code, secrets.token_urlsafe(16), make_session, self.limits,
                        clock=self.clock)
        except BaseException:
            with self._lock:
                self._rooms.pop(code, None)
            raise
        with self._lock:
            self._rooms[code] = room
        return room

    def get(self, code: str) -> Room:
        """The open room with this code; RoomError (one line) if there is none."""
        key = normal_code(code)
        with self._lock:
            room = self._rooms.get(key)
        if room is None or room.closed:
            shown = key[:12] or "(empty)"
            raise RoomError(f"no open room has the code {shown}: check the code on the "
                            f"projector ({CODE_LEN} letters and digits)")
        room.last_seen = self.clock()
        return room

    def close(self, code: str, token: str) -> None:
        """The lecturer ends the room: its engine stops and its code is freed."""
        room = self.get(code)
        if not secrets.compare_digest(str(token), room.token):
            raise RoomError("only the lecturer who opened this room can close it")
        with self._lock:
            self._rooms.pop(room.code, None)
        room.close()

    def sweep(self) -> list[str]:
        """Closes rooms idle past limits.idle_s; returns their codes."""
        now = self.clock()
        with self._lock:
            idle = [c for c, r in self._rooms.items()
                    if r is not None and now - r.last_seen > self.limits.idle_s]
            rooms = [self._rooms.pop(c) for c in idle]
        for room in rooms:
            room.close()
        return idle

    def close_all(self) -> None:
        with self._lock:
            rooms = [r for r in self._rooms.values() if r is not None]
            self._rooms.clear()
        for room in rooms:
            room.close()

    def codes(self) -> list[str]:
        with self._lock:
            return [c for c, r in self._rooms.items() if r is not None]

    def __len__(self) -> int:
        with self._lock:
            return len(self._rooms)


ROOMS = Classroom()  # the process's rooms


def model_sessions(loaded: Any, capacity_tokens: int | None = None) -> MakeSession:
    """Room engines on a loaded model (its weights shared by every room; each room's engine in
    its own process, scenarios/live.py), each keeping at most 20,000 events and 200 finished
    requests however long the lesson."""
    cap = capacity_tokens or ROOMS.limits.capacity_tokens
    factory = functools.partial(own_process_service, max_events=20_000, max_history=200)
    return lambda tree: LiveSession(loaded, cap, tree=tree, service_factory=factory)


class CharTokenizer:
    """One token per character (its code point), with a plain chat template: what the
    simulated engine reads when no model is loaded. Called, and rendering the template as
    text (`tokenize=False`), as a Hugging Face tokenizer is: the Live page's "why" panel
    (engine/why.py's HFCodec) reads it so.

    >>> t = CharTokenizer(); ids = t.apply_chat_template([{"role": "user", "content": "hi"}],
    ...     add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    >>> t.decode(ids)
    'user: hi\\nassistant: '
    >>> t(t.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False))[
    ...     "input_ids"] == ids
    True
    """

    chat_template = "{role}: {content}\\n per message, then 'assistant: '"
    max_token_chars = 1  # a token is one character (engine/admission.py bounds prompts by it)

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = True,
                            **kw: Any) -> Any:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return {"input_ids": [ord(ch) for ch in text]} if tokenize else text

    def __call__(self, text: str, **kw: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def encode(self, text: str, **kw: Any) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: list[int], **kw: Any) -> str:
        return "".join(chr(i) for i in ids if 0 <= i < 0x110000)

    def __deepcopy__(self, memo: dict) -> CharTokenizer:
        return self


@dataclass
class SimLoaded:
    """The fields of a LoadedModel that LiveSession and the simulated backend read."""

    tokenizer: Any = field(default_factory=CharTokenizer)
    name: str = "simulated engine"


def sim_sessions(tokenizer: Any = None, step_s: float = 0.0,
                 capacity_tokens: int | None = None) -> MakeSession:
    """Room engines without a model: EngineService over the simulated backend (the real
    scheduler and caches, priced; engine/backends.py)."""
    cap = capacity_tokens or ROOMS.limits.capacity_tokens

    factory = sim_service(step_s, max_events=10_000, max_history=200)
    return lambda tree: LiveSession(SimLoaded(tokenizer or CharTokenizer()), cap, tree=tree,
                                    service_factory=factory)


__all__ = ["ALPHABET", "CODE_LEN", "Classroom", "ENGINE", "ROOMS", "Room", "RoomError",
           "RoomLimits", "model_sessions", "new_code", "normal_code", "sim_sessions"]
