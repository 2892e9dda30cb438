"""Downloads written to a temporary file and served from it, never built in the server's memory.

A download is a function that writes its file to a binary stream (`Writer`). `DownloadDir`
runs it into one browser session's folder under the app's `static/` folder, which Streamlit
serves at `app/static/` straight from disk (`server.enableStaticServing`, .streamlit/config.toml),
and stops it with `OverCap` once it passes its cap (CAP_BYTES: Streamlit serves at most 200 MB
from there). The folder goes when its browser session does (`close`, swept as a Live engine is).
Leaves out: the page's buttons and links (pages/_downloads.py) and what each file holds.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

ROOT = Path(__file__).resolve().parents[1] / "static" / "downloads"  # beside app.py's static/
URL = "app/static/downloads"  # Streamlit's route to it, relative to the page
CAP_BYTES = 100_000_000  # above this a page offers a filtered or compressed export instead
STALE_S = 24 * 3600.0  # a folder untouched this long is a dead server's, removed at the next start

Writer = Callable[[BinaryIO], None]


class OverCap(Exception):
    """A file passed its cap while being written (its partial file is removed)."""


class Prepared(NamedTuple):
    name: str  # the file name the browser saves it as
    path: Path  # where it lies on the server
    url: str  # relative to the page: app/static/downloads/<folder>/<name>
    size: int  # bytes


class Capped(io.RawIOBase):
    """A binary stream that counts what is written through it and raises OverCap past `cap`.

    >>> import io; out = Capped(io.BytesIO(), 4); out.write(b"abc"), out.written
    (3, 3)
    >>> out.write(b"de")
    Traceback (most recent call last):
    ...
    runtime.downloads.OverCap: over the cap of 4 bytes
    """

    def __init__(self, raw: BinaryIO, cap: int) -> None:
        super().__init__()
        self.raw, self.cap, self.written = raw, cap, 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.written += len(memoryview(data).cast("B"))
        if self.written > self.cap:
            raise OverCap(f"over the cap of {self.cap:,} bytes")
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def human_size(n: float) -> str:
    """Bytes in words: human_size(512) = '512 B', human_size(5_053_834_310) = '5.05 GB'.

    >>> human_size(1_234_567)
    '1.23 MB'
    """
    for unit, step in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= step:
            return f"{n / step:.3g} {unit}" if n < 100 * step else f"{n / step:,.0f} {unit}"
    return f"{int(n)} B"


class DownloadDir:
    """One browser session's prepared files: a random folder name (the URL is the only key to
    it, as Streamlit's own media ids are), one file per `slot` (preparing a slot again replaces
    its file). Thread-safe; `close` removes the folder."""

    def __init__(self, root: Path | None = None) -> None:
        self.name = secrets.token_hex(16)
        self.path = (root or ROOT) / self.name
        self._files: dict[str, tuple[Prepared, object]] = {}  # slot -> (file, what it is of)
        self._lock = threading.Lock()
        self.closed = False

    def get(self, slot: str, ident: object = None) -> Prepared | None:
        """The file prepared in `slot` for `ident` (what it was written from: a step, a
        setting), if it is still on disk."""
        with self._lock:
            got = self._files.get(slot)
        if got is None or got[1] != ident or not got[0].path.is_file():
            return None
        return got[0]

    def prepare(self, slot: str, name: str, write: Writer, cap: int = CAP_BYTES,
                ident: object = None) -> Prepared:
        """Runs `write` into a new file (at most `cap` bytes, else OverCap) and keeps it in
        `slot` for `ident`, removing the one it replaces."""
        if self.closed:
            raise RuntimeError("this session's downloads are closed")
        self.path.mkdir(parents=True, exist_ok=True)
        final = self.path / _safe(name)
        part = self.path / f".{secrets.token_hex(6)}.part"
        try:
            with open(part, "wb") as raw:
                write(Capped(raw, cap))
            size = part.stat().st_size
            with self._lock:
                if self.closed:  # the session ended while this was written
                    raise RuntimeError("this session's downloads are closed")
                old = self._files.pop(slot, None)
                if final in {p.path for p, _ in self._files.values()}:  # another slot's name
                    final = self.path / _safe(f"{slot}-{final.name}")
                if old is not None and old[0].path != final:
                    old[0].path.unlink(missing_ok=True)
                os.replace(part, final)
                got = Prepared(final.name, final, f"{URL}/{self.name}/{final.name}", size)
                self._files[slot] = (got, ident)
            return got
        finally:
            part.unlink(missing_ok=True)

    def close(self) -> None:
        self.closed = True
        shutil.rmtree(self.path, ignore_errors=True)


def _safe(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80].lstrip(".")
    return keep or "download"


def remove_stale(root: Path | None = None, max_age_s: float = STALE_S) -> list[str]:
    """Removes session folders not written for `max_age_s` (left by a server that stopped
    without closing them); returns their names."""
    root, gone = root or ROOT, []
    now = time.time()
    for d in root.iterdir() if root.is_dir() else ():
        if d.is_dir() and now - d.stat().st_mtime > max_age_s:
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d.name)
    return gone
