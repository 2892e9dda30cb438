"""Fixtures for the browser tests: one `streamlit run app.py` per session on a free port, and
Debian's Chromium through Playwright. The server's stderr goes to a file whose tail is shown
if it dies. Every context and page the browser makes waits (clicks, navigation, `expect`) up to
Playwright's defaults times the machine factor (tests/machine.py), as the explicit waits do."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("playwright")
from browserhelp import CHROMIUM, start_server  # noqa: E402
from machine import ms, seconds  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402


def _scaled(make):
    """`browser.new_context` / `new_page` whose result waits the scaled defaults and asks for
    reduced motion (Streamlit's running icon and the app's CSS transitions stay still: on two
    shared cores the renderer and the compositor drew them all through the suite; a test that
    watches an animation says `page.emulate_media(reduced_motion="no-preference")`)."""
    def made(*args, **kwargs):
        kwargs.setdefault("reduced_motion", "reduce")
        made_obj = make(*args, **kwargs)
        made_obj.set_default_timeout(ms(30_000))
        made_obj.set_default_navigation_timeout(ms(30_000))
        return made_obj
    return made


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The shared server. Its Live page runs the simulated engine (RADIXLENS_LIVE_ENGINE=sim):
    no model in this server (the model's load, its forkserver and an engine process for each of
    the three tests that open /live: those three took 108.7 CPU-s with the model and 68.1
    without, whole process tree, load ~5.5; 72 and 59 at load ~1.5). The real model's Live page
    in a browser is test_app_load.py's (its own server), in AppTest test_app_live.py's. Updating
    the README's screenshots (RADIXLENS_UPDATE_SCREENSHOTS=1) runs the real model, for them."""
    sim = {} if os.environ.get("RADIXLENS_UPDATE_SCREENSHOTS") else {"RADIXLENS_LIVE_ENGINE": "sim"}
    proc, url = start_server(tmp_path_factory.mktemp("streamlit") / "stderr.txt", env=sim)
    yield url
    proc.terminate()
    proc.wait(timeout=seconds(20))


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
        b.new_context, b.new_page = _scaled(b.new_context), _scaled(b.new_page)
        expect.set_options(timeout=ms(5_000))
        yield b
        b.close()


@pytest.fixture(scope="session")
def tabs(browser):
    """One browser context for the plain tabs, so each tab after the first reads the app's
    scripts from the context's cache, compiled, instead of fetching and compiling them again."""
    ctx = browser.new_context()
    yield ctx
    ctx.close()


def _tab(tabs, width: int, height: int):
    """A fresh tab of the given viewport: a new browser session of the app."""
    tab = tabs.new_page()
    tab.set_viewport_size({"width": width, "height": height})
    yield tab
    tab.close()


@pytest.fixture
def page(tabs):
    """A fresh 1400 x 1000 tab."""
    yield from _tab(tabs, 1400, 1000)


@pytest.fixture
def projector(tabs):
    """A fresh 1280 x 800 tab: a lecture hall's projector."""
    yield from _tab(tabs, 1280, 800)
