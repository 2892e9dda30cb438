"""Downloads that the server writes to a file first and the browser then fetches from disk.

Each download shows its size before any click: small ones (EAGER_BYTES) are written with the
page, so one click on their link fetches them; bigger ones have a button with the estimated size
that writes the file (in a worker with a progress bar past WORKER_BYTES), and a link with the
exact size replaces it. A file over the cap (runtime/downloads.py CAP_BYTES) is not offered; the
page offers its smaller forms instead (a step range, gzip). Nothing goes through Streamlit's
media store, so no rerun between two clicks can lose a file (issue 41: two downloads clicked
back to back, one came to nothing). Not a page: pages call `show_item`.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, NamedTuple

import streamlit as st

from pages._serve import download_dir, holdings, jobs, wait_for
from pages._shell import say, session_id
from runtime.downloads import CAP_BYTES, OverCap, Prepared, human_size
from runtime.jobs import QueueFull

EAGER_BYTES = 2_000_000  # written with the page when the item allows it: a link at once
WORKER_BYTES = 8_000_000  # bigger: written by a worker, with a progress bar and a cancel button
Progress = Callable[[float, str], None]
Write = Callable[[BinaryIO, Progress, threading.Event], None]
LINK_CSS = """<style>
a.rl-download { display: inline-block; padding: 0.3rem 0.7rem; border-radius: 0.5rem;
  border: 1px solid rgba(49, 51, 63, 0.3); text-decoration: none; color: inherit;
  white-space: normal; }
a.rl-download:hover { border-color: #ff4b4b; color: #ff4b4b; }
</style>"""


class Item(NamedTuple):
    slot: str  # the session's place for this download (a key: "trace.events")
    name: str  # the file name the browser saves
    size: int  # bytes, before writing (`exact` or an estimate)
    exact: bool
    write: Write  # writes the file: (out, progress, cancel)
    ident: tuple = ()  # what the file is made from (a step, settings): another is not shown
    eager: bool = False  # cheap to write: written with the page when small
    label: str = ""  # the button's and the link's words (default: the file name)


def size_words(item: Item) -> str:
    """'1.2 MB', or '≈ 1.2 MB' for an estimate."""
    return human_size(item.size) if item.exact else f"≈ {human_size(item.size)}"


def link(where: Any, got: Prepared, text: str = "") -> None:
    """The link that fetches a prepared file (`text`, default its name, and its size):
    `download` keeps the file's name; a click starts no rerun."""
    where.html(LINK_CSS + f'<a class="rl-download" href="{html.escape(got.url)}" '
               f'download="{html.escape(got.name)}">&#11015; {html.escape(text or got.name)} '
               f'({human_size(got.size)})</a>')


def show_item(item: Item, where: Any = None, cap: int | None = None) -> Prepared | None:
    """The item's link, or its button, or its job's progress, or why it is not offered (over
    `cap`), in `where` (a column; default: here); returns the prepared file once there is one."""
    where = st.container() if where is None else where
    cap = CAP_BYTES if cap is None else cap
    if item.size > cap:
        where.caption(f"{item.name}: {size_words(item)}, over the {human_size(cap)} cap "
                      "for a download; see the smaller forms offered.")
        return None
    folder = download_dir()
    got = folder.get(item.slot, item.ident)
    if got is not None:
        link(where, got, item.label)
        return got
    running = st.session_state.get(f"downloads.job.{item.slot}")
    if running is not None and running[0] == item.ident:
        return _finish(item, running[1], where)
    spot = where.empty()  # the button, and in the click's own run the link in its place
    small = item.size <= EAGER_BYTES
    if (item.eager and small) or spot.button(f"{item.label or item.name} ({size_words(item)})",
                                             key=f"downloads.{item.slot}",
                                             help=f"writes {item.name} on the server; then its "
                                                  "link (exact size) downloads it"):
        spot.empty()
        where = spot.container()
        if item.size <= WORKER_BYTES:
            return _prepared(item, where, lambda: _write(folder, item, cap))
        # a big file: a worker writes it (progress, cancel); the page reruns when it is done
        try:
            job = jobs().submit(f"{item.name}", lambda progress, cancel: _write(
                folder, item, cap, progress, cancel))
        except QueueFull as exc:
            say("error", f"The server is busy: {exc}")
            return None
        st.session_state[f"downloads.job.{item.slot}"] = (item.ident, job)
        # held for the session: a closed tab's download stops (and lets go of its replay)
        holdings().put(session_id(), f"download.{item.slot}", job)
        return _finish(item, job, where)
    return None


def _write(folder: Any, item: Item, cap: int, progress: Progress | None = None,
           cancel: threading.Event | None = None) -> Prepared:
    cancel = cancel or threading.Event()
    say = progress or (lambda fraction, text: None)
    return folder.prepare(item.slot, item.name, lambda out: item.write(out, say, cancel), cap,
                          item.ident)


def _prepared(item: Item, where: Any, run: Callable[[], Prepared]) -> Prepared | None:
    """Runs `run` here; its link, or the reason it failed, in `where`."""
    try:
        got = run()
    except OverCap as exc:
        where.warning(f"{item.name} came out {exc}; see the smaller forms offered.")
        return None
    except (OSError, RuntimeError, ValueError) as exc:
        where.error(f"{item.name} could not be written: {exc}")
        return None
    link(where, got, item.label)
    return got


def _finish(item: Item, job: Any, where: Any) -> Prepared | None:
    """A worker's file: its progress while it runs, then its link (or why not)."""
    with where:
        if not wait_for(job, f"writing {item.name}"):
            return None
    st.session_state.pop(f"downloads.job.{item.slot}", None)
    if job.state == "cancelled":
        where.caption(f"{item.name}: cancelled.")
        return None
    return _prepared(item, where, job.take)
