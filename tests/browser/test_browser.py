"""A real browser: `streamlit run app.py` headless on a free port, Debian's Chromium via Playwright.

Plays the Tour to R2's split and checks the drawn SVG gained a node; uploads the Mooncake sample
on the Trace page and sees the replay summary. Screenshots go to tmp_path, and the README ones
are copied to docs/screenshots/.
"""

from __future__ import annotations

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


def _shoot(pg, tmp_path: Path, name: str) -> None:
    pg.screenshot(path=str(tmp_path / name), full_page=True)
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
    page.wait_for_timeout(600)  # let the split transition finish for the picture
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
    _shoot(page, tmp_path, "trace.png")
