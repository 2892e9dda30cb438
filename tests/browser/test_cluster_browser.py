"""The Cluster page in Chromium at 1280 x 800, presenter mode: the three replicas' trees and
the router's view above the fold, no text under 12 px, no text cut."""

from __future__ import annotations

import pytest
from browserhelp import CLIPPED, ILLEGIBLE, in_viewport, shoot, wait_drawn
from machine import ms

pytestmark = pytest.mark.browser

# Graphviz charts are SVG scaled to their column: every label's drawn height, in px.
GRAPHVIZ_SMALL = """() => {
  const out = [];
  document.querySelectorAll("[data-testid=stGraphVizChart] svg text").forEach((t) => {
    const h = t.getBoundingClientRect().height;
    if (t.textContent.trim() && h > 0 && h < 12) out.push(`${h.toFixed(1)}px: ${t.textContent}`);
  });
  return out;
}"""


def test_cluster_page_in_presenter_mode(server, projector, tmp_path):
    projector.goto(f"{server}/cluster?presenter=1")
    wait_drawn(projector)
    # the four charts arrive one by one: wait for the fourth's drawing, not the first's
    projector.wait_for_function(
        "document.querySelectorAll('[data-testid=stGraphVizChart] svg').length >= 4",
        timeout=ms(60_000),
    )
    charts = projector.locator("[data-testid=stGraphVizChart]")
    assert charts.count() == 4  # three replicas and the router's approximate tree
    for i in range(4):
        box = charts.nth(i).bounding_box()
        assert box is not None and box["y"] + box["height"] <= 800, f"chart {i} below the fold"
    assert in_viewport(projector, "[data-testid=stGraphVizChart] >> nth=3")
    assert projector.evaluate(GRAPHVIZ_SMALL) == []
    assert projector.evaluate(ILLEGIBLE) == [] and projector.evaluate(CLIPPED) == []
    assert "imbalanced" in projector.locator("[data-testid=stMain]").inner_text()
    shoot(projector, tmp_path, "cluster_presenter.png", full=False)
