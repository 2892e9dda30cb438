"""What a session holds on the server, and letting go of it: workers, big objects, budgets.

Process-wide, shared by every browser session: the worker pool for heavy work (`jobs`, with
`wait_for` showing a job's queue place or progress and a cancel button), the Live engines
(`live_sessions`), each session's prepared downloads (`download_dirs`), the big objects a
session holds (`holdings`: a trace replay) and the memory budget (runtime/budget.py). `sweep`,
run by app.py on every page run, lets go of all of it for browser sessions that are gone, so
the server's memory follows its load.
Not a page: app.py does not list it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from runtime.budget import BUDGET, give_back_memory, resident_growth
from runtime.downloads import DownloadDir, remove_stale
from runtime.jobs import Job, JobPool
from runtime.sessions import SessionRegistry
from viz.escape import esc_md


@st.cache_resource
def jobs() -> JobPool:
    """The process's worker pool for heavy work (replays, simulations): 2 at a time."""
    return JobPool(workers=2, max_queued=16)


def wait_for(job: Any, label: str, wait_s: float = 1.5) -> bool:
    """True once `job` has ended. Until then shows its queue place or progress (and a cancel
    button) in a fragment that reruns the page when the job ends."""
    job.wait(wait_s)
    if not job.pending:
        return True

    @st.fragment(run_every=0.5)
    def _waiting() -> None:
        if not job.pending:
            st.rerun(scope="app")
        place = job.place()
        running, _ = jobs().status()
        where = f"in the queue: place {place} ({running} running)" if place else job.text
        st.progress(job.fraction, text=esc_md(f"{label}: {where}"))
        if st.button("cancel", key=f"shell.cancel.{job.id}"):
            job.cancel()
            st.rerun(scope="app")

    _waiting()
    return False


@st.cache_resource
def download_dirs() -> SessionRegistry:
    """Process-wide: browser session id -> its folder of prepared downloads (removed with the
    session); the first call removes what a server that stopped left behind."""
    remove_stale()
    return SessionRegistry()


def download_dir() -> DownloadDir:
    """This browser session's folder of prepared downloads (pages/_downloads.py)."""
    ctx = get_script_run_ctx()
    sid, reg = ctx.session_id if ctx is not None else "bare", download_dirs()
    folder = reg.get(sid)
    if folder is None or folder.closed:
        folder = DownloadDir()
        reg.put(sid, folder)
    return folder


@st.cache_resource
def live_sessions() -> SessionRegistry:
    """Process-wide: browser session id -> its Live engine session."""
    return SessionRegistry()


class Holdings:
    """Process-wide: browser session id -> {name: object} for what a session holds that is
    big (a trace replay): kept here, not in st.session_state, so `sweep` can drop it the moment
    the browser is gone instead of when Streamlit collects the session (minutes later).
    Letting go of a holding (replaced, or its session gone) cancels the jobs it names that
    still run: a closed tab's what-ifs stop, and their worker processes are killed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, Any]] = {}

    def get(self, sid: str, name: str) -> Any:
        with self._lock:
            return self._held.get(sid, {}).get(name)

    def put(self, sid: str, name: str, value: Any) -> None:
        with self._lock:
            mine = self._held.get(sid) if value is None else self._held.setdefault(sid, {})
            old = None if mine is None else mine.pop(name, None)
            if value is not None:
                mine[name] = value
        if old is not None and old is not value:  # what it held is let go: its jobs stop
            _cancel_jobs(old)

    def sweep(self, is_active: Any) -> list[str]:
        """Drops what browser sessions that are gone held, cancelling their jobs that still
        run (the what-ifs' worker processes are killed); returns their ids."""
        with self._lock:
            dead = [sid for sid in self._held if not is_active(sid)]
            gone = [self._held.pop(sid) for sid in dead]
        for held in gone:
            for value in held.values():
                _cancel_jobs(value)
        return dead


def _cancel_jobs(value: Any) -> None:
    """Cancels the pending jobs a holding names (itself, or its dict's values)."""
    for job in value.values() if isinstance(value, dict) else (value,):
        if isinstance(job, Job) and job.pending:
            job.cancel()


@st.cache_resource
def holdings() -> Holdings:
    return Holdings()


def _is_active(sid: str) -> bool:
    return not runtime.exists() or runtime.get_instance().is_active_session(sid)


def sweep() -> list[str]:
    """Closes the Live engines and releases the memory budget of browser sessions that are
    gone (run on every page run, by any session); returns their ids. Memory freed in bulk is
    handed back to the system (glibc's malloc_trim), so the server's size follows its load."""
    resident_growth()  # the first page run sets the baseline the Trace page measures from
    dead = (live_sessions().sweep(_is_active) + holdings().sweep(_is_active)
            + download_dirs().sweep(_is_active))
    if runtime.exists():
        rt = runtime.get_instance()
        gone = [sid for sid in BUDGET.sessions() if not rt.is_active_session(sid)]
        for sid in gone:
            BUDGET.release(sid)
        dead += gone
    if dead:
        _trim()
        with _EXPIRING_LOCK:
            _EXPIRING.append(time.monotonic())
    _collect_expired()
    return dead


# when sweeps found sessions gone: Streamlit keeps a closed session (its session_state, page
# namespace and the block pools they name) for server.disconnectedSessionTTL, then drops it
# on its next write, never shut down: reference cycles that wait for a full collection
_EXPIRING: list[float] = []
_EXPIRING_LOCK = threading.Lock()  # sweeps run on every session's script thread


def _collect_expired() -> None:
    """Once the closed sessions found by a sweep are past Streamlit's TTL, collect and trim
    (issue 27: app_load with the Mooncake excerpt kept ~80 MiB of such garbage after 3
    sessions, 250,008 KVCacheBlocks of dropped block pools among it)."""
    ttl = float(st.get_option("server.disconnectedSessionTTL") or 0)
    now = time.monotonic()
    with _EXPIRING_LOCK:
        due = [t for t in _EXPIRING if now - t > ttl + 1]
        del _EXPIRING[:len(due)]  # in time order: the due ones come first
    if due:
        _trim()


def _trim() -> None:
    give_back_memory()
