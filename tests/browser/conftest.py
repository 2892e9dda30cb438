"""Fixtures for the browser tests: one `streamlit run app.py` per session on a free port, and
Debian's Chromium through Playwright. The server's stderr goes to a file whose tail is shown
if it dies."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("playwright")
from browserhelp import CHROMIUM, ROOT  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(err_path, *extra: str) -> tuple[subprocess.Popen, str]:
    """A Streamlit server for app.py; returns (process, base URL) once it accepts connections."""
    port = _free_port()
    err = open(err_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false", *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            assert proc.poll() is None, open(err_path).read()[-2000:]
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the server did not start in 60 s")


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    proc, url = start_server(tmp_path_factory.mktemp("streamlit") / "stderr.txt")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="session")
def browser():
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh 1400 x 1000 tab (a new browser session of the app)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()


@pytest.fixture
def projector(browser):
    """A fresh 1280 x 800 tab: a lecture hall's projector."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    yield pg
    ctx.close()
