"""A process-wide registry: browser session id -> the thing that session keeps running.

The Live page's engine sessions and the Watch page's subscriptions each outlive a page run, so
the server keeps them here: `put` replaces (closing the old one), `sweep` closes those whose
browser session has ended. Anything with a `close()` fits. Leaves out: limits (the pages' own).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=Closable)


class SessionRegistry(Generic[S]):
    """Thread-safe; closes outside its lock (a close may wait for a thread).

    >>> class Box:
    ...     closed = False
    ...     def close(self): self.closed = True
    >>> reg, a, b = SessionRegistry(), Box(), Box()
    >>> reg.put("s1", a); reg.put("s1", b); a.closed, b.closed, len(reg)
    (True, False, 1)
    >>> reg.sweep(lambda sid: False), b.closed, len(reg)
    (['s1'], True, 0)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, S] = {}

    def put(self, session_id: str, session: S | None) -> None:
        """Keeps `session` for `session_id` (None: keeps nothing); the one it replaces closes."""
        with self._lock:
            old = self._sessions.pop(session_id, None)
            if session is not None:
                self._sessions[session_id] = session
        if old is not None and old is not session:
            old.close()

    def sweep(self, is_active: Callable[[str], bool]) -> list[str]:
        """Closes and forgets sessions whose browser session has ended; returns their ids."""
        with self._lock:
            dead = [sid for sid in self._sessions if not is_active(sid)]
            gone = [self._sessions.pop(sid) for sid in dead]
        for session in gone:
            session.close()
        return dead

    def get(self, session_id: str) -> S | None:
        with self._lock:
            return self._sessions.get(session_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
