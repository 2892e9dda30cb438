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
from enginehelp import engine_serve  # noqa: E402
from machine import ms  # noqa: E402

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


# For `span` ms, every frame: how many charts (ECharts with the SVG renderer, or plotly) and
# trees are painted (an svg with content); the fewest seen, the count at the start, and how many
# fragment refreshes ran meanwhile.
WATCH_DRAWN = """(span) => new Promise((done) => {
  const shown = (sel, inner) => [...document.querySelectorAll(sel)]
    .filter((c) => c.querySelector(inner) && c.getBoundingClientRect().height > 0).length;
  const painted = () => shown("[data-testid=stEChartsChart]", "svg path")
    + shown("[data-testid=stPlotlyChart]", ".main-svg")
    + [...document.querySelectorAll(".radixlens-tree")]
      .filter((t) => t.querySelector("g.node") && t.getBoundingClientRect().height > 0).length;
  const app = document.querySelector("[data-testid=stApp]"), t0 = performance.now();
  let least = Infinity, runs = 0, was = null;
  const first = painted();
  const look = () => {
    least = Math.min(least, painted());
    const state = app.dataset.testScriptState;
    if (state !== was && state === "running") runs += 1;
    was = state;
    if (performance.now() - t0 < span) requestAnimationFrame(look);
    else done({first, least, runs});
  };
  look();
})"""


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
    # the page refreshes every second, and a second prompt reruns it all: over 6 s of that no
    # chart or tree goes blank, not for one frame (#24 item 8: the plotly rates chart was
    # remounted blank on most refreshes). Sent under 4x CPU throttling, where the plotly page
    # failed every run (4 of 4; 4 of 4 unthrottled too)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
    page.evaluate("(span) => { window.rlDrawn = (" + WATCH_DRAWN + ")(span); }", ms(6_000))
    page.get_by_role("button", name="send", exact=True).click()
    drawn = page.evaluate("() => window.rlDrawn")
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
    assert drawn["runs"] >= 2 and drawn["first"] >= 4, drawn
    # keyed ECharts fixed the rates chart's blank frame (4 of 4 runs before); one chart still
    # went blank for a frame in 2 of ~14 runs on a busy machine (which one is not known yet):
    # an xfail naming #24 item 8 after the other checks, not a pass
    blank = drawn["least"] < drawn["first"]
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
    if blank:
        pytest.xfail(f"#24 item 8, open: a chart went blank during a refresh ({drawn})")
