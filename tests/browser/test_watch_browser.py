"""A real browser watches `python -m engine serve --dp 2` from the Live page.

The Live page's "watch a server" mode takes the server's base URL and opens the "Watch a
server" page on it, which discovers the publishers and connects; the test sends a prompt from
the page and waits until that prompt's blocks are drawn: a worker's caption counts cached
blocks, its block grid and its prefix tree are painted, and the sent prompt's row says when its
blocks landed. The screenshot goes to tmp_path (docs/screenshots/watch_live.png with
RADIXLENS_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("playwright")
from browserhelp import ILLEGIBLE, PAINTED  # noqa: E402
from enginehelp import engine_serve  # noqa: E402
from machine import ms  # noqa: E402
from playwright.sync_api import Error as PlaywrightError  # noqa: E402

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine_url():
    with engine_serve() as seen:
        yield seen[0].split()[2]


def test_watch_engine_serve_and_see_a_prompt_land(engine_url, server, page, tmp_path):
    """The shared app server and browser (conftest.py): a second Playwright in the same
    thread would find the first one's event loop running."""
    page.goto(f"{server}/live")
    page.get_by_role("radio", name="watch a server").click()
    base = page.get_by_label("server base URL (OpenAI API)")
    base.fill(engine_url)
    base.press("Enter")
    page.get_by_role("button", name="watch this server").click()
    page.wait_for_url("**/watch?base=*", timeout=ms(60_000))
    page.wait_for_function(  # discovered and connected on arrival
        "() => (document.querySelector('textarea') || {}).value?.includes('tcp://')",
        timeout=ms(60_000))
    page.get_by_text("blocks of", exact=False).first.wait_for(timeout=ms(60_000))
    # a system prompt goes first, as real clients send one (the box had no place for it)
    system = page.get_by_label("system prompt (optional): the prefix your clients share")
    system.fill("You are a camping-shop assistant. Answer in one sentence.")
    system.press("Enter")
    page.wait_for_selector("[data-testid=stApp][data-test-script-state=notRunning]",
                           timeout=ms(60_000))
    page.get_by_role("button", name="send", exact=True).click()
    # the prompt lands: a worker holds its blocks, and its row says after how long
    page.wait_for_function(
        r"""() => [...document.querySelectorAll('[data-testid=stCaptionContainer]')]
            .some(c => /^[1-9][0-9,]* blocks of 16 tokens cached/.test(c.innerText))""",
        timeout=ms(120_000))
    page.wait_for_selector(".radixlens-tree svg g.node >> nth=1", state="attached",
                           timeout=ms(60_000))
    captions = page.locator("[data-testid=stCaptionContainer]").all_inner_texts()
    held = [int(m.group(1).replace(",", "")) for c in captions
            if (m := re.match(r"([0-9,]+) blocks of 16", c))]
    assert max(held) >= 1
    assert page.locator("[data-testid=stException]").count() == 0
    # the page refreshes every second (a fragment), and a second prompt is sent meanwhile: over
    # 6 s of that no chart or tree goes blank, not for one frame (#24 item 8). Under 4x CPU
    # throttling. Plotly's rates chart was re-mounted blank on most refreshes (4 of 4 runs);
    # with keyed ECharts, a send that reran the whole page still dropped the live fragment's
    # charts (all four, or one worker's column) and re-created them unpainted in 2 of 8 busy
    # runs; with the prompt row in a fragment of its own, 0 of 8 (pages/watch.py)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
    page.evaluate(f"(span) => {{ window.rlDrawn = ({PAINTED})(span); }}", ms(6_000))
    page.get_by_role("button", name="send", exact=True).click()
    drawn = page.evaluate("() => window.rlDrawn")
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
    assert drawn["runs"] >= 2 and drawn["first"] >= 4, drawn
    assert drawn["least"] == drawn["first"], f"a chart or tree went blank: {drawn}"
    # both workers side by side: their grids drawn in one row (tabs hid all but one, #24)
    grids = [page.locator(f".st-key-watch-grid-{i}").bounding_box() for i in (0, 1)]
    assert all(g is not None and g["width"] > 0 for g in grids), grids
    assert abs(grids[0]["y"] - grids[1]["y"]) < 2 and grids[0]["x"] < grids[1]["x"], grids
    tall = page.evaluate("() => document.querySelector('[data-testid=stMain]')"
                         ".scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(max(tall, 1000), 6000)})
    page.screenshot(path=str(tmp_path / "watch_live.png"))
    if os.environ.get("RADIXLENS_UPDATE_SCREENSHOTS"):
        shutil.copy(tmp_path / "watch_live.png",
                    ROOT / "docs" / "screenshots" / "watch_live.png")
    # presenter mode: each worker's tree folded to fit its column, labels >= 14 px (#24 item 4:
    # drawn at the plain scale, at most 1.5 x 9 = 13.5 px)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_text("presenter mode").click()
    page.wait_for_url("**presenter=1**", timeout=ms(60_000))
    small = "() => (" + ILLEGIBLE + ")().filter((t) => t.startsWith('tree'))"
    try:
        page.wait_for_function(small + ".length === 0 && !!document.querySelector("
                               "'.radixlens-tree g.node')", timeout=ms(30_000))
    except PlaywrightError:
        pass
    assert page.evaluate(small) == []
