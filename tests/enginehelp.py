"""`python -m engine serve --dp 2` on CPU as a subprocess, for the tests that talk to a live server.

Ports are the operating system's choice (0): the server prints its URL and its publishers'
endpoints before "ready", and the tests read them from those lines. Used by
tests/engine/test_engine_serve.py and tests/browser/test_watch_browser.py.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from machine import seconds

ROOT = Path(__file__).resolve().parent.parent
SERVE = [sys.executable, "-m", "engine", "serve", "--port", "0", "--dp", "2", "--device", "cpu",
         "--capacity", "4096", "--kv-events-endpoint", "tcp://*:0",
         "--kv-replay-endpoint", "tcp://*:0"]


@contextmanager
def engine_serve(timeout: float | None = None, argv: list[str] | None = None,
                 env: dict[str, str] | None = None,
                 extra: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """The server's lines up to "ready" (the first names its URL); the server stops on exit.
    Each line may take `timeout` s (180 s on an idle machine, scaled: loading the model).
    `argv`: the command (default SERVE); `env`: its environment (default this process's);
    `extra`: more arguments (a later --dp or --router wins over SERVE's)."""
    timeout = timeout or seconds(180)
    proc = subprocess.Popen([*(argv or SERVE), *extra], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    try:
        while not seen or seen[-1].strip() != "ready":
            try:
                seen.append(lines.get(timeout=timeout))
            except queue.Empty:
                pytest.fail("engine serve did not start:\n" + "".join(seen))
            assert proc.poll() is None, "".join(seen)
        yield seen
    finally:
        proc.terminate()
        proc.wait(timeout=seconds(30))
