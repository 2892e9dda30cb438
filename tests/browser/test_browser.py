"""A real browser: `streamlit run app.py` headless, Debian's Chromium via Playwright.

Plays the Tour to R2's split and checks the drawn SVG gained a node; uploads the Mooncake sample
on the Trace page and sees the replay summary; opens every page of app.py's PAGE_SPECS whose file
exists. Screenshots go to tmp_path once everything on the page is drawn; with
RADIXLENS_UPDATE_SCREENSHOTS=1 they are also copied to docs/screenshots/<url path>.png (README).
"""

from __future__ import annotations

import ast

import pytest
from browserhelp import DRAWN, ROOT, TREE, click_next_until, shoot, wait_drawn
from machine import ms

pytestmark = pytest.mark.browser


def _page_specs() -> list[tuple[str, str, str]]:
    """app.py's PAGE_SPECS, read without running app.py; only pages whose file exists."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "PAGE_SPECS":
            return [s for s in ast.literal_eval(stmt.value) if (ROOT / s[0]).exists()]
    raise AssertionError("app.py has no PAGE_SPECS")


def _renders(pg) -> int:
    return int(pg.eval_on_selector(TREE, "e => e.dataset.renders || 0"))


def _svg_nodes(pg) -> int:
    return pg.eval_on_selector(TREE, "e => e.querySelectorAll('svg g.node').length")


def test_tour_split_adds_a_drawn_node(server, page, tmp_path):
    page.goto(server)  # the home page sends on to the Tour
    page.wait_for_selector(f"{TREE} svg g.node", timeout=ms(60_000))
    click_next_until(page, "R2 calls match_prefix")
    page.wait_for_function(DRAWN, timeout=ms(30_000))
    settled = _renders(page)
    before = _svg_nodes(page)  # root, R1's leaf
    click_next_until(page, "R2 leaves R1 at token 2,055")
    page.wait_for_function(f"() => Number(document.querySelector('{TREE}').dataset.renders) > "
                           f"{settled}", timeout=ms(60_000))
    page.wait_for_function(f"() => document.querySelectorAll('{TREE} svg g.node').length == "
                           f"{before + 1}", timeout=ms(30_000))
    assert (before, _svg_nodes(page)) == (2, 3)
    page.wait_for_function(DRAWN, timeout=ms(30_000))  # the split transition has ended
    shoot(page, tmp_path, "tour.png")


def test_trace_upload_shows_summary(server, page, tmp_path):
    page.goto(f"{server}/trace")
    page.wait_for_selector("[data-testid=stFileUploaderDropzoneInput]", state="attached",
                           timeout=ms(60_000))
    sample = ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl"
    page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(sample))
    page.get_by_text("Replay summary: mooncake_excerpt.jsonl").wait_for(timeout=ms(180_000))
    page.get_by_text("Invariants held after every request.").wait_for(timeout=ms(30_000))
    assert "200 requests" in page.inner_text("h3")
    wait_drawn(page)
    shoot(page, tmp_path, "trace.png")


@pytest.mark.parametrize("url", [s[2] for s in _page_specs() if s[2] not in ("tour", "trace")])
def test_page_screenshot(server, page, tmp_path, url):
    """Every other page: it renders (its title, no exception box) and is drawn; the Tour and
    the Trace pages get theirs from the tests above, in a state worth showing."""
    page.goto(f"{server}/{url}")
    wait_drawn(page)
    assert page.locator("[data-testid=stException]").count() == 0
    shoot(page, tmp_path, f"{url}.png")
