"""Memory budgets: what one browser session's replays may hold, and what the whole process may.

A replay reserves its estimated bytes before it starts (refused with the figures when a budget
would be passed), raises its reservation as it goes (`reserve` again: a replay past the budget
stops with the figures, never an out-of-memory), and releases it when the session ends or
replaces its trace. The defaults fit a classroom server; RADIXLENS_SESSION_MB and
RADIXLENS_PROCESS_MB set them, and RADIXLENS_TRACE_LIMITS ("max_total_output_tokens=1e8,
max_requests=200000": the `--limit` names of the command line) what an uploaded trace may hold
(`server_limits`; the Trace page passes both to its replay). Leaves out: measuring Python
objects exactly (estimates are calibrated in the tests and in benchmarks/app_load.py).
"""

from __future__ import annotations

import ctypes
import gc
import os
import struct
import threading
from typing import NamedTuple

from radix.traces.limits import TraceLimits, parse_limits

MIB = 2**20
SESSION_MB = int(os.environ.get("RADIXLENS_SESSION_MB", "1536"))
PROCESS_MB = int(os.environ.get("RADIXLENS_PROCESS_MB", "6144"))


def server_limits(spec: str | None = None) -> TraceLimits:
    """What an upload may hold: the defaults with RADIXLENS_TRACE_LIMITS (or `spec`) put in."""
    return parse_limits(os.environ.get("RADIXLENS_TRACE_LIMITS", "") if spec is None else spec)


class BudgetError(MemoryError):
    """A reservation that would pass a budget; the message has the figures."""


def mib(n: int) -> str:
    """Bytes in MiB for people: mib(3 * 2**20 // 2) == '1.5 MiB'."""
    return f"{n / MIB:,.1f} MiB"


class Usage(NamedTuple):
    session: int  # bytes this session holds
    process: int  # bytes every session holds together
    session_limit: int
    process_limit: int


class Budget:
    """Thread-safe ledger: session id -> {what: bytes}."""

    def __init__(self, session_bytes: int = SESSION_MB * MIB,
                 process_bytes: int = PROCESS_MB * MIB) -> None:
        self.session_bytes, self.process_bytes = session_bytes, process_bytes
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, int]] = {}

    def usage(self, session_id: str) -> Usage:
        with self._lock:
            mine = sum(self._held.get(session_id, {}).values())
            total = sum(sum(d.values()) for d in self._held.values())
        return Usage(mine, total, self.session_bytes, self.process_bytes)

    def reserve(self, session_id: str, what: str, nbytes: int) -> None:
        """Holds `nbytes` for `what` (replacing what it held before); BudgetError if a budget
        would be passed."""
        with self._lock:
            held = self._held.setdefault(session_id, {})
            mine = sum(v for k, v in held.items() if k != what) + nbytes
            total = sum(sum(d.values()) for d in self._held.values()) - held.get(what, 0) + nbytes
            if mine > self.session_bytes:
                raise BudgetError(f"{what} needs {mib(nbytes)}; this session may hold "
                                  f"{mib(self.session_bytes)} and holds {mib(mine - nbytes)}")
            if total > self.process_bytes:
                raise BudgetError(f"{what} needs {mib(nbytes)}; the server may hold "
                                  f"{mib(self.process_bytes)} for all sessions and holds "
                                  f"{mib(total - nbytes)}: try again later")
            held[what] = nbytes

    def release(self, session_id: str, what: str | None = None) -> None:
        """Drops one reservation, or (what=None) everything the session holds."""
        with self._lock:
            if what is None:
                self._held.pop(session_id, None)
            else:
                self._held.get(session_id, {}).pop(what, None)

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._held)


BUDGET = Budget()  # the process's ledger


def resident_bytes() -> int | None:
    """The process's resident memory now (Linux /proc; None elsewhere): what it really holds,
    beside the budget's estimates."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


_BASELINE: list[int] = []  # resident bytes at the first `resident_growth` call


def resident_growth() -> tuple[int, int] | None:
    """(resident bytes now, growth since the first call) or None off Linux. app.py's shell calls
    it on every page run, so the first call is the server's first page run: code and models
    loaded, nothing uploaded. The growth is what the sessions really hold (plus caches of the
    pages), measured, beside the budget's estimates."""
    now = resident_bytes()
    if now is None:
        return None
    if not _BASELINE:
        _BASELINE.append(now)
    return now, now - _BASELINE[0]


def set_aside_heap() -> None:
    """Leaves every object alive now out of the cyclic collector's passes (gc.freeze) until
    `give_back_memory` hands them back (gc.unfreeze, then its full collection). Called once a
    big replay is built: its ~1.3 M objects (the conversation stand-in) live as long as the
    session, and every full collection rescanned them all, ~0.5 s of CPU each, one every few
    slider jumps (each block pool drawn is ~63 K new objects) and one in the explainer. Garbage
    among them (a cycle dropped meanwhile) waits for the next give_back_memory: a session
    closing or replacing its trace.
    """
    gc.freeze()


def give_back_memory() -> None:
    """Hands memory freed in bulk (a dropped replay) back to the system: struct's cache of
    compiled formats emptied, a full collection, then glibc's malloc_trim, which returns the
    free pages inside the heap as well as its top (Python's own arenas go back when they
    empty). Not glibc: the memory is reused instead.
    subtle: block hashing packs each run of tokens with a format of its own length ("<123q");
    struct keeps the last 100 compiled, small objects made late in a replay, and they pinned
    17 of the 1 MiB arenas it had emptied (issue 27: tests/scenarios/test_memory_given_back.py).
    """
    struct._clearcache()
    gc.unfreeze()  # what set_aside_heap left out of the passes: collected with the rest
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
