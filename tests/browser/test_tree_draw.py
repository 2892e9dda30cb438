"""The tree view's bundle alone in Debian's Chromium (no Streamlit): a 1,000-node step, clicks.

The bundle is mounted in a bare page the way Streamlit mounts it (viz/component/harness.py).
No time bound here (a busy machine is slow, not wrong): a step's cost is checked as work, the
DOM elements a step re-creates; its milliseconds come from benchmarks/tree_draw.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("playwright")

from browserhelp import ILLEGIBLE, THROUGH  # noqa: E402
from machine import ms  # noqa: E402

from radix.tree.radix_cache import RadixCache  # noqa: E402
from scenarios.bigtree import split_workload  # noqa: E402
from viz.component import BUNDLE, view_data  # noqa: E402
from viz.component.harness import draw_step, open_bundle  # noqa: E402
from viz.scene import tree_scene  # noqa: E402

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def bundle_page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    open_bundle(pg, BUNDLE, timeout_ms=ms(30_000))
    yield pg
    ctx.close()


def test_thousand_node_split_step_completes(bundle_page):
    page = bundle_page
    """Each step: one split and one new leaf, so the drawn node count grows by 2; the nodes that
    were there stay the same DOM elements (keyed by id, moved, not re-created)."""
    snaps = split_workload(1_000, 2)
    draw_step(page, view_data(tree_scene(snaps[0]), 600, 250))
    for snap in snaps[1:]:
        page.evaluate("() => document.querySelectorAll('g.node').forEach(e => e.__old = 1)")
        out = draw_step(page, view_data(tree_scene(snap), 600, 250))
        assert out["error"] is None and out["nodes"] == len(snap.nodes)
        kept = page.evaluate("() => [...document.querySelectorAll('g.node')]"
                             ".filter(e => e.__old).length")
        assert kept == len(snap.nodes) - 2


def test_click_returns_node_id_and_split_keeps_ids(bundle_page):
    page = bundle_page
    """insert [1,2,3] then [1,2,4]: node 1 splits; ids n0..n3 drawn, edge e1 now leaves n2.
    A click on node 3 sends 3 back as the trigger value."""
    c = RadixCache()
    c.insert([1, 2, 3])
    draw_step(page, view_data(tree_scene(c.snapshot()), 300, 50))
    c.insert([1, 2, 4])
    out = draw_step(page, view_data(tree_scene(c.snapshot()), 300, 50))
    assert out["nodes"] == 4
    ids = page.evaluate("() => [...document.querySelectorAll('g.node')].map(e => e.id).sort()")
    assert ids == ["n0", "n1", "n2", "n3"]
    assert page.text_content("g.edge#e1 text") == "1 tok[3]"
    page.click("g.node#n3")
    assert page.evaluate("() => window.rlClicked") == 3


def test_edges_skirt_labels_and_presenter_labels_stay_14px(bundle_page):
    """#24 item 4. Root -> [1..8] -> 24 leaves of 2 tokens (labels "8 tok" / "2 tok" and their
    ids), TB then LR: no edge path passes through an edge label. Drawn with min_font_px=14 (as
    presenter mode asks), every node and edge label is >= 14 px on screen and the highlighted
    leaf (the last one) is inside the view; without it the same tree fits the 1,400 px host
    only with labels under 14 px (the edge labels at 9 units x a scale under 1.56)."""
    page = bundle_page
    c = RadixCache()
    for i in range(24):
        c.insert([*range(1, 9), 100 + i, 200 + i])
    last = max(n.id for n in c.snapshot().nodes)
    for rankdir in ("TB", "LR"):
        draw_step(page, view_data(tree_scene(c.snapshot(), rankdir=rankdir), 400, 50))
        assert page.evaluate(THROUGH) == [], rankdir
    scene = tree_scene(c.snapshot(), highlight={last: "new"})
    draw_step(page, view_data(scene, 400, 50))
    assert page.evaluate(ILLEGIBLE) != []  # fitted whole: too small for a projector
    draw_step(page, view_data(scene, 400, 50, min_font_px=14))
    assert page.evaluate(ILLEGIBLE) == []
    box = page.locator(f"g.node#n{last}").bounding_box()
    host = page.locator(".radixlens-tree").bounding_box()
    assert host["x"] <= box["x"] and box["x"] + box["width"] <= host["x"] + host["width"]
    assert host["y"] <= box["y"] and box["y"] + box["height"] <= host["y"] + host["height"]


def test_tier_moves_recolour_and_travel(bundle_page):
    """#20: the host tier walk's frames (scenarios/hosttier.py) in the tree view. Frame 2: chat
    A's node #1 backed up (green: device + host copy). Frame 3: #1 demoted, drawn with a 20 s
    transition: right after the draw its box is still fading (not orange yet), a copy of it in
    the host's orange is sliding down, and the host counts the move. Frames 4-7 end the fade
    (the next style change sets the colour). Frame 8: #3 (A's first 5 tokens) loaded back, a
    copy in the device's blue rising into it; when the transition ends #3 is green and its
    copy gone; #1 and #2 stay orange, their labels white."""
    from scenarios.hosttier import run_frames
    from viz.hosttier import tier_scene

    page, frames = bundle_page, run_frames()
    host = "document.querySelector('.radixlens-tree')"
    fill = "(i) => document.querySelector(`g.node#${i} > rect:not(.rl-move)`).getAttribute('fill')"

    def show(k: int, duration: int, settle: bool = True) -> None:
        f = frames[k]
        out = draw_step(page, view_data(tier_scene(f.nodes, f.moved, f.event), 300, duration),
                        wait_settle=False)
        assert out["error"] is None and out["nodes"] == len(f.nodes)
        if settle:
            page.wait_for_function(f"() => {host}.dataset.animating === '0'")

    show(2, 50)
    moves = page.evaluate(f"() => Number({host}.dataset.moves || 0)")
    assert page.evaluate(fill, "n1") in ("#2ca02c", "rgb(44, 160, 44)")
    show(3, 20_000, settle=False)
    assert page.get_attribute("g.node#n1", "data-move") == "demote"
    assert page.evaluate(fill, "n1") not in ("#ff7f0e", "rgb(255, 127, 14)")  # still fading
    assert page.get_attribute("g.node#n1 rect.rl-move", "fill") == "#ff7f0e"
    assert page.evaluate(f"() => Number({host}.dataset.moves)") == moves + 1
    for k in range(4, 8):
        show(k, 50)
    assert page.evaluate(fill, "n1") == "#ff7f0e"
    show(8, 300)
    assert page.get_attribute("g.node#n3", "data-move") == "load"
    assert page.evaluate(f"() => {host}.dataset.lastMove") == "n3 load #1f77b4"
    assert page.evaluate(fill, "n3") == "rgb(44, 160, 44)"
    assert page.locator("g.node#n3 rect.rl-move").count() == 0
    assert [page.evaluate(fill, i) for i in ("n1", "n2")] == ["#ff7f0e"] * 2
    assert page.get_attribute("g.node#n2 text", "fill") == "#ffffff"
    # presenter mode's view (pages/_shell.py's tier_tree_height: 240 px, labels >= 14 px):
    # the deepest tree is drawn whole, not panned (#24 item 4: at 220 px it was)
    f = frames[8]
    draw_step(page, view_data(tier_scene(f.nodes, f.moved, f.event), 240, 50, 2.4, 14.0))
    assert page.evaluate(ILLEGIBLE) == []
    box = page.locator(".radixlens-tree").bounding_box()
    for g in page.locator("g.node").all():
        b = g.bounding_box()
        assert box["y"] - 1 <= b["y"] and b["y"] + b["height"] <= box["y"] + box["height"] + 1
