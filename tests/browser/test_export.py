"""Export for slides: the Tour's download of a frame range is one self-contained HTML file that
plays by itself in a browser, offline."""

from __future__ import annotations

import pytest
from browserhelp import TREE, export_offline, wait_drawn
from machine import ms

pytestmark = pytest.mark.browser


def test_tour_export_plays_offline(server, page, tmp_path):
    """Frames 9..19 of the walk around R2's split, downloaded from the page, opened from disk
    with every network request refused: the frame counter advances on its own and the tree
    gains R2's split node on the way."""
    page.goto(f"{server}/tour?step=5&k=1")
    wait_drawn(page)
    html, viewer, fetched, offline = export_offline(page, "export frames for slides",
                                                    tmp_path, "frames.html", 60_000)
    assert "window.RadixLensTree=" in html and "http" not in html.split("<script>")[0]

    viewer.wait_for_selector(f"{TREE} g.node", timeout=ms(30_000))
    counts = {viewer.locator(f"{TREE} g.node").count()}
    viewer.wait_for_function("() => Number(document.body.dataset.frame) >= 4", timeout=ms(30_000))
    viewer.wait_for_function(
        f"() => document.querySelectorAll('{TREE} g.node').length === 3", timeout=ms(60_000))
    counts.add(viewer.locator(f"{TREE} g.node").count())
    assert counts == {2, 3} and fetched == []
    offline.close()
