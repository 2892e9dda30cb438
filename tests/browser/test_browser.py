"""A real browser: `streamlit run app.py` headless on a free port, Debian's Chromium via Playwright.

Plays the Tour to R2's split and checks the drawn SVG gained a node; uploads the Mooncake sample
on the Trace page and sees the replay summary; opens every page of app.py's PAGE_SPECS whose file
exists. Screenshots go to tmp_path, once everything on the page is drawn (the script stopped
running, every tree's transition ended, every chart and table painted); with
RADIXLENS_UPDATE_SCREENSHOTS=1 they are also copied to docs/screenshots/<url path>.png (README).
"""

from __future__ import annotations

import ast
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("playwright")
from playwright.sync_api import sync_playwright  # noqa: E402

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "docs" / "screenshots"
TREE = ".radixlens-tree"
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"
DRAWN = """() => {
  const every = (sel, ok) => [...document.querySelectorAll(sel)].every(ok);
  return every("[data-testid=stBidiComponentRegular]",
               (c) => (c.querySelector(".radixlens-tree") || {dataset: {}})
                             .dataset.animating === "0")
    && every("[data-testid=stPlotlyChart]", (c) => c.querySelector(".main-svg"))
    && every("[data-testid=stDataFrame]", (c) => c.querySelector("canvas, table"));
}"""


def _page_specs() -> list[tuple[str, str, str]]:
    """app.py's PAGE_SPECS, read without running app.py; only pages whose file exists."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "PAGE_SPECS":
            return [s for s in ast.literal_eval(stmt.value) if (ROOT / s[0]).exists()]
    raise AssertionError("app.py has no PAGE_SPECS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    err = tmp_path_factory.mktemp("streamlit") / "stderr.txt"
    with open(err, "w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err_file,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None, err.read_text()
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def page():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"],
        )
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield pg
        browser.close()


def _renders(pg) -> int:
    return int(pg.eval_on_selector(TREE, "e => e.dataset.renders || 0"))


def _wait_renders(pg, n: int) -> None:
    pg.wait_for_function(
        f"() => Number((document.querySelector('{TREE}') || {{dataset: {{}}}})"
        f".dataset.renders || 0) >= {n}", timeout=60_000)


def _svg_nodes(pg) -> int:
    return pg.eval_on_selector(TREE, "e => e.querySelectorAll('svg g.node').length")


def _wait_drawn(pg, timeout_ms: int = 180_000) -> None:
    """The script has finished its run and everything it put on the page has been drawn."""
    pg.wait_for_selector("h1", timeout=timeout_ms)
    pg.wait_for_selector(IDLE, timeout=timeout_ms)
    pg.wait_for_function(DRAWN, timeout=timeout_ms)
    pg.wait_for_selector(IDLE, timeout=timeout_ms)


def _shoot(pg, tmp_path: Path, name: str) -> None:
    """The whole page: Streamlit scrolls inside its main block, so the viewport is made as tall
    as the content (at most 6,000 px) for the picture, then put back."""
    size = pg.viewport_size
    tall = pg.evaluate("() => (document.querySelector('[data-testid=stMain]') || "
                       "document.body).scrollHeight")
    pg.set_viewport_size({"width": size["width"], "height": max(size["height"], min(tall, 6000))})
    pg.wait_for_function(DRAWN, timeout=60_000)
    pg.screenshot(path=str(tmp_path / name))
    pg.set_viewport_size(size)
    if os.environ.get("RADIXLENS_UPDATE_SCREENSHOTS"):  # refresh the README's pictures
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / name, SHOTS / name)


def _click_next_until(pg, text: str, limit: int = 40) -> None:
    for _ in range(limit):
        if pg.get_by_text(text).count():
            return
        before = pg.inner_text("[data-testid=stAlert]")
        pg.get_by_role("button", name="next ▶").click()
        pg.wait_for_function(
            "b => (document.querySelector('[data-testid=stAlert]') || {}).innerText !== b",
            arg=before, timeout=30_000)
    raise AssertionError(f"never saw {text!r}")


def test_tour_split_adds_a_drawn_node(server, page, tmp_path):
    page.goto(server)  # the Tour is the default page of st.navigation
    page.wait_for_selector(f"{TREE} svg g.node", timeout=60_000)
    _click_next_until(page, "R2 calls match_prefix")
    _wait_renders(page, _renders(page))
    settled = _renders(page)
    before = _svg_nodes(page)  # root, R1's leaf
    _click_next_until(page, "R2 leaves R1 at token 2,055")
    _wait_renders(page, settled + 1)
    page.wait_for_function(f"() => document.querySelectorAll('{TREE} svg g.node').length == "
                           f"{before + 1}", timeout=30_000)
    assert (before, _svg_nodes(page)) == (2, 3)
    page.wait_for_function(DRAWN, timeout=30_000)  # the split transition has ended
    _shoot(page, tmp_path, "tour.png")


def test_trace_upload_shows_summary(server, page, tmp_path):
    page.goto(f"{server}/trace")
    page.wait_for_selector("[data-testid=stFileUploaderDropzoneInput]", state="attached",
                           timeout=60_000)
    sample = ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl"
    page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(sample))
    page.get_by_text("Replay summary: mooncake_excerpt.jsonl").wait_for(timeout=120_000)
    page.get_by_text("Invariants held after every request.").wait_for(timeout=30_000)
    assert "200 requests" in page.inner_text("h3")
    _wait_drawn(page)
    _shoot(page, tmp_path, "trace.png")


@pytest.mark.parametrize("url", [s[2] for s in _page_specs() if s[2] not in ("tour", "trace")])
def test_page_screenshot(server, page, tmp_path, url):
    """Every other page: it renders (its title, no exception box) and is drawn; the Tour and
    the Trace pages get theirs from the tests above, in a state worth showing."""
    page.goto(f"{server}/{url}")
    _wait_drawn(page)
    assert page.locator("[data-testid=stException]").count() == 0
    _shoot(page, tmp_path, f"{url}.png")
