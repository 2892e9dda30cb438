"""Presenter mode at 1280 x 800 (a projector), deep links, and pages opened by URL.

Each test opens its page with `presenter=1` in the URL and checks what a lecturer sees without
scrolling: the animated node in the viewport, no label cut, the lock walk of 5 hops, the block
grid beside the tree on the Live and Scheduler pages, the policies popping different leaves, a
deep link restoring a step, a failing op log showing its last good tree.
"""

from __future__ import annotations

import json

import pytest
from browserhelp import (
    CLIPPED,
    DRAWN,
    ILLEGIBLE,
    PAINTED,
    REDRAWN,
    ROOT,
    THROUGH,
    TREE,
    alert,
    click_and_redraw,
    in_viewport,
    shoot,
    start_server,
    wait_drawn,
)
from machine import ms, seconds

pytestmark = pytest.mark.browser


def _open(pg, server: str, path: str, tree: bool = True) -> None:
    """Opens `path` in presenter mode and waits until it is drawn (its tree too, if it has one:
    the component mounts after the script ends, so "drawn" alone could pass before it)."""
    sep = "&" if "?" in path else "?"
    pg.goto(f"{server}{path}{sep}presenter=1")
    wait_drawn(pg)
    if tree:
        pg.wait_for_selector(f"{TREE} g.node", timeout=ms(60_000))
        pg.wait_for_function(DRAWN, timeout=ms(60_000))


def _clipped(pg) -> list[str]:
    return pg.evaluate(CLIPPED)


def _illegible(pg) -> list[str]:
    """Tree labels under 14 px, plotly text under 12, toolbars over buttons, and edge lines
    drawn through their labels (#24 item 4)."""
    return pg.evaluate(ILLEGIBLE) + pg.evaluate(THROUGH)


# Every frame while the script runs: where Streamlit's running indicator is, and whether it
# meets the presenter toggle's label (#24 item 8: it covered the toggle).
WATCH_STATUS = """() => { window.rlStatus = []; const look = () => {
  const s = document.querySelector("[data-testid=stStatusWidget]");
  const t = document.querySelector(".st-key-shell-presenter label");
  if (s && t && s.getBoundingClientRect().width) {
    const a = s.getBoundingClientRect(), b = t.getBoundingClientRect();
    window.rlStatus.push(a.left < b.right && b.left < a.right && a.top < b.bottom
                         && b.top < a.bottom);
  }
  requestAnimationFrame(look); }; look(); }"""


GRID = "[data-testid=stEChartsChart]"  # vLLM's block grid, a keyed ECharts chart (#24)


def test_deep_link_restores_a_step_in_presenter_mode(server, projector, tmp_path):
    """/?page=tour&step=7 lands on the Tour at step 7 (R2's insert), presenter mode on, the
    URL keeping both; the split node of the repeat walk's step 5 event 1 is highlighted inside
    the viewport, with the grid and the numbers row: the Tour's longest step sentence (439
    characters, four lines; the numbers row was at 774-843 px, below the fold, #24 item 4).
    Then the hybrid walk's component trees and vLLM's groups (issue 38) in view and legible."""
    _open(projector, server, "/?page=tour&step=7")
    assert alert(projector).startswith("step 7: R2 calls insert")
    assert "/tour?" in projector.url and "step=7" in projector.url
    assert "presenter=1" in projector.url
    assert projector.locator("[data-testid=stCheckbox] input").first.is_checked()
    _open(projector, server, "/tour?walk=repeat&step=5&k=1")
    assert alert(projector).startswith("R1-again leaves R1 at token 2,150")
    assert in_viewport(projector, f"{TREE} g.node[data-role=split]")
    assert in_viewport(projector, GRID)
    assert in_viewport(projector, "[data-testid=stMetric]")  # the numbers row (#24 item 4)
    assert _clipped(projector) == [] and _illegible(projector) == []
    shoot(projector, tmp_path, "tour_presenter.png", full=False)
    # the hybrid walk at R2's match (issue 38): both component trees, Qwen3.5's split node a
    # Mamba tombstone outlined as cut, vLLM's groups under each tree, all legible at 1280x800
    _open(projector, server, "/tour?walk=hybrid&step=5")
    assert "no Mamba state at 1,600 (node #2 is a Mamba tombstone)" in alert(projector)
    assert in_viewport(projector, f"{TREE} g.node[data-role=cut]")
    assert in_viewport(projector, f"{GRID} >> nth=1")  # Qwen3.5's four groups, the cut at 0
    assert _clipped(projector) == [] and _illegible(projector) == []
    shoot(projector, tmp_path, "tour_hybrid_presenter.png", full=False)


# True when the tree view shows a fold stub (node m<id>) or a chain box (c<id>: ancestors drawn
# as one) and every drawn node lies inside its host; else what was outside and what was drawn.
FOLDED_TO_FIT = """(() => {
  const host = document.querySelector(".radixlens-tree"), r = host.getBoundingClientRect();
  const nodes = [...host.querySelectorAll("g.node")].map((g) => [g.id, g.getBoundingClientRect()]);
  const out = nodes.filter(([, b]) => b.left < r.left - 1 || b.right > r.right + 1
    || b.top < r.top - 1 || b.bottom > r.bottom + 1).map(([id]) => id);
  return nodes.some(([id]) => /^[mc]/.test(id)) && out.length === 0
    || JSON.stringify({out, ids: nodes.map(([id]) => id)});
})()"""
# True when every drawn node lies inside the tree view's host, or the host scrolls (issue 41: a
# tree whose nodes the frame is about does not fit at 14 px: drawn whole at that size, the host
# scrolls, data-scroll=1, and overflows); else what was outside and whether it scrolls.
SHOWN = """(() => {
  const host = document.querySelector(".radixlens-tree"), r = host.getBoundingClientRect();
  if (host.dataset.scroll === "1")
    return host.scrollHeight > host.clientHeight + 1 || host.scrollWidth > host.clientWidth + 1
      || "scroll=1 without overflow";
  const out = [...host.querySelectorAll("g.node")].filter((g) => {
    const b = g.getBoundingClientRect();
    return b.left < r.left - 1 || b.right > r.right + 1 || b.top < r.top - 1
      || b.bottom > r.bottom + 1; }).map((g) => g.id);
  return out.length === 0 || JSON.stringify({out, scroll: host.dataset.scroll});
})()"""
# The labels of the tree view's node boxes.
BOXES = "() => [...document.querySelectorAll('.radixlens-tree g.node')].map((g) => g.textContent)"


def _walk(pg, hops: int, ref: str) -> list[str]:
    """Clicks next `hops` times; each frame (once the tree has drawn it) highlights one node as
    a lock, reading `ref`, in view (the host scrolled to it when the tree is taller than the
    view), with the grid and the numbers row (a 15-row grid and a four-line lookup caption
    beside it pushed them to 761-830 px at step 22 event 1); returns their ids."""
    out = []
    for hop in range(1, hops + 1):
        text = click_and_redraw(pg, "next ▶")
        node = pg.locator(f"{TREE} g.node[data-role=lock]")
        assert node.count() == 1 and ref in node.text_content(), text
        assert in_viewport(pg, f"{TREE} g.node[data-role=lock]")
        shown = pg.evaluate(SHOWN)
        assert shown is True, (hop, shown)
        assert in_viewport(pg, GRID) and in_viewport(pg, "[data-testid=stMetric]"), hop
        out.append(node.get_attribute("id"))
    return out


def test_lock_walk_of_five_hops_hop_by_hop(server, projector, tmp_path):
    """The multi-turn walk at u000-t5's inc_lock_ref (step 22): five clicks of next show five
    hops, each a different node highlighted as a lock with r=1, in view at 14 px labels,
    ending at the root; then the whole locked path is on screen at once, five boxes reading
    r=1 (issue 41: the fold showed root, #2 and "+2 more (5 nodes) / 1 locked"); its
    dec_lock_ref (step 24) walks the same five back to r=0. While the page runs, Streamlit's
    running indicator is seen and never over the presenter toggle."""
    _open(projector, server, "/tour?walk=multi-turn&step=22&k=0")
    assert alert(projector).startswith("step 22: u000-t5 calls inc_lock_ref")
    projector.evaluate(WATCH_STATUS)
    hops = _walk(projector, 5, "r=1")
    seen = projector.evaluate("() => window.rlStatus")
    # whether the indicator shows at all during a hop depends on the machine's speed: when it
    # does, it is never over the toggle
    assert not any(seen or []), "the running indicator must not cover the toggle"
    assert len(set(hops)) == 5 and "the last hop below the root" in alert(projector)
    boxes = projector.evaluate(BOXES)
    assert sum("r=1" in b for b in boxes) == 5 and not any(b.startswith("+") for b in boxes)
    assert _clipped(projector) == [] and _illegible(projector) == []
    shoot(projector, tmp_path, "lock_walk.png", full=False)
    _open(projector, server, "/tour?walk=multi-turn&step=24&k=0")
    assert alert(projector).startswith("step 24: u000-t5 calls dec_lock_ref")
    assert _walk(projector, 5, "r=0") == hops


def test_policies_pop_different_leaves(server, projector):
    """The eviction lab's default at the pop frame (step 2): LRU pops the RAG leaf (#1), LFU
    the oldest finished conversation (conv-000, #3), MRU the newest (conv-015, #18). At 14 px
    the lab's tree folds (S's "+N more" summary) until all of it lies inside the view, the
    popped leaf among what is drawn (#24 item 4; old code: LR, 12 boxes, panned), and the
    numbers row under the tree is above the fold (it was at 880-949 px). vLLM's block grid
    beside it is whole above the fold too, every label of it >= 14 px, its runs of rows alike
    folded and said (31 rows of 16 px ran past the fold, labels at 12-13 px). A settings change
    (300 -> 400 tokens to free) redraws vLLM's grid in place: no chart or tree unpainted on
    any frame (#24: the plotly grid, keyed by its figure, was re-mounted blank), and it still
    fits."""
    popped = {}
    for policy in ("lru", "lfu", "mru"):
        _open(projector, server, f"/eviction?policy={policy}&step=2")
        assert alert(projector).startswith("pops "), alert(projector)
        assert in_viewport(projector, f"{TREE} g.node[data-role=evicted]")
        # the numbers under the tree (freed so far, evictable, protected) above the fold too
        assert in_viewport(projector, "[data-testid=stMetric]")
        popped[policy] = projector.locator(f"{TREE} g.node[data-role=evicted]").get_attribute("id")
        folded = projector.evaluate(FOLDED_TO_FIT)
        assert folded is True, folded
        assert _clipped(projector) == [] and _illegible(projector) == []
    assert popped == {"lru": "n1", "lfu": "n3", "mru": "n18"}
    _grid_fits(projector)
    projector.evaluate(f"(span) => {{ window.rlDrawn = ({PAINTED})(span); }}", ms(8_000))
    box = projector.get_by_label("tokens to free")
    box.fill("400")
    box.press("Enter")
    drawn = projector.evaluate("() => window.rlDrawn")
    wait_drawn(projector)
    assert projector.get_by_text("Eviction lab: 400 tokens must go").count() == 1
    assert drawn["runs"] >= 1 and drawn["states"][-1].startswith("notRunning"), drawn
    assert drawn["first"] >= 2 and drawn["least"] == drawn["first"], drawn
    _grid_fits(projector)


# The font sizes (px) of every text the Eviction lab's block grid draws.
LAB_GRID = ".st-key-eviction-grid [data-testid=stEChartsChart]"
GRID_TEXT_PX = f"""() => [...document.querySelectorAll("{LAB_GRID} svg text")]
  .filter((t) => t.textContent.trim()).map((t) => parseFloat(getComputedStyle(t).fontSize))"""


def _grid_fits(pg) -> None:
    """The Eviction lab's block grid whole in the viewport, its labels >= 14 px, and what is
    folded said under it."""
    assert in_viewport(pg, LAB_GRID), pg.locator(LAB_GRID).bounding_box()
    sizes = pg.evaluate(GRID_TEXT_PX)
    assert sizes and min(sizes) >= 13.95, sizes
    assert "Folded to fit" in pg.inner_text("[data-testid=stMain]")


def test_scheduler_shows_tree_and_blocks(server, projector, tmp_path):
    """The tree whose matches decide LPM's order (the first offered request's path in blue)
    and vLLM's pool beside it, both in view at 1280 x 800; the queue chart's before -> after
    buttons are not under plotly's toolbar. Its 8 nodes are all drawn at 14 px (a tree that
    small is the lesson, issue 41), the host scrolling where they do not fit."""
    _open(projector, server, "/scheduler")
    assert projector.locator(f"{TREE} g.node[data-role=matched]").count() >= 2
    assert projector.locator(f"{TREE} g.node").count() == 8
    shown = projector.evaluate(SHOWN)
    assert shown is True, shown
    projector.wait_for_selector(f"{GRID} svg path", timeout=ms(60_000))
    assert "vLLM's pool" in projector.inner_text(GRID)
    assert in_viewport(projector, TREE) and in_viewport(projector, GRID)
    assert projector.locator(".updatemenu-button").count() == 2
    assert _clipped(projector) == [] and _illegible(projector) == []
    shoot(projector, tmp_path, "scheduler_presenter.png", full=False)


def test_live_shows_tree_and_blocks(server, projector, tmp_path):
    """The three-request scenario, all at once (on the shared server's simulated engine,
    conftest.py; the real model's Live page in a browser: test_app_load.py): the tree and vLLM's
    block grid side by side, the whole tree view above the 800 px fold (issue 41 item 7: two
    more lines above it pushed its last box to 851 px), the lock walks and the admission told,
    with one kind of arrow (markdown had turned "->" into "→" in the alert only)."""
    _open(projector, server, "/live", tree=False)
    projector.get_by_text("requests and settings").click()  # folded in presenter mode
    projector.get_by_text("all at once").click()  # one batch: no chain of submissions to wait on
    projector.get_by_role("button", name="run 3 requests").click()
    projector.get_by_text("requests done").wait_for(timeout=ms(60_000))
    projector.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=stMetricValue]')]"
        ".some(e => e.innerText.trim() === '3')", timeout=ms(180_000))
    wait_drawn(projector)
    projector.get_by_text("requests and settings").click()  # fold them again
    projector.wait_for_selector(f"{TREE} g.node", timeout=ms(60_000))
    projector.wait_for_function(DRAWN, timeout=ms(60_000))
    assert projector.locator(f"{TREE} g.node").count() >= 2
    assert projector.get_by_text("vLLM's block pool, same requests").count() == 1
    projector.evaluate("() => document.querySelectorAll('*').forEach((e) => { "
                       "if (e.scrollTop) e.scrollTop = 0; })")  # back to the top of the page
    assert in_viewport(projector, TREE) and in_viewport(projector, "[data-testid=stEChartsChart]")
    told = projector.inner_text("[data-testid=stMain]")
    assert "locks #" in told and "unlocks #" in told  # both walks, narrated
    assert "hops up to the root" in told and "->" not in told
    assert _clipped(projector) == [] and _illegible(projector) == []
    shoot(projector, tmp_path, "live_presenter.png", full=False)


def test_failing_op_log_shows_its_last_good_tree(server, projector, tmp_path):
    ops = tmp_path / "double_unlock.jsonl"
    ops.write_text("".join(json.dumps(o) + "\n" for o in (
        {"op": "insert", "tokens": [1, 2, 3]}, {"op": "insert", "tokens": [1, 2, 4]},
        {"op": "lock", "node": 1}, {"op": "unlock", "node": 1}, {"op": "unlock", "node": 1})))
    _open(projector, server, "/trace", tree=False)
    projector.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(ops))
    projector.get_by_text("never goes below 0").wait_for(timeout=ms(60_000))
    wait_drawn(projector)
    alerts = " ".join(projector.locator("[data-testid=stAlert]").all_inner_texts())
    assert "line 5" in alerts
    projector.wait_for_selector(f"{TREE} g.node", timeout=ms(60_000))  # mounts after the script
    projector.wait_for_function(DRAWN, timeout=ms(60_000))
    assert projector.locator(f"{TREE} g.node").count() == 4  # root, [1,2], [3], [4]
    assert "#tokens: 4" in projector.inner_text("[data-testid=stCode]")
    # the Trace debugger's tree in presenter mode: top-down, fitted, labels >= 14 px (#24
    # item 4: drawn LR at the plain scale, at most 1.5 x 9 = 13.5 px)
    assert _illegible(projector) == []


def test_trace_step_that_locks_the_deepest_path_draws_every_node_of_it(server, projector):
    """mooncake_excerpt.jsonl (the Trace debugger's sample), step 226: cache_finished_req
    unlocks #118 > #152 > #32 (the deepest path any step of it highlights, 4 below the root,
    with the new leaf #153). #24 drew the three as one "3 nodes" chain box; each is a node the
    step changed, so each is its own box now (issue 41), every label >= 14 px, the view
    scrolled to them where the tree does not fit."""
    projector.goto(f"{server}/trace?presenter=1")
    projector.wait_for_selector("[data-testid=stFileUploaderDropzoneInput]", state="attached",
                                timeout=ms(60_000))
    projector.set_input_files("[data-testid=stFileUploaderDropzoneInput]",
                              str(ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl"))
    projector.wait_for_selector(f"{TREE} g.node", timeout=ms(120_000))
    wait_drawn(projector)
    before = int(projector.eval_on_selector(TREE, "e => e.dataset.renders || 0"))
    box = projector.locator(".st-key-trace-box input")
    box.fill("226")
    box.press("Enter")
    projector.get_by_text("step 226 of ").first.wait_for(timeout=ms(60_000))
    projector.wait_for_function(REDRAWN, arg=before, timeout=ms(60_000))
    wait_drawn(projector)
    shown = projector.evaluate(SHOWN)
    assert shown is True, shown
    locks = projector.locator(f"{TREE} g.node[data-role=lock]")
    assert sorted(locks.nth(i).get_attribute("id") for i in range(locks.count())) == [
        "n118", "n152", "n32"]
    assert [t for t in projector.evaluate(ILLEGIBLE) if t.startswith("tree")] == []


def test_page_by_url_right_after_a_server_start_keeps_the_menu(tmp_path, browser):
    """A fresh server; the very first visit is /scheduler: the page and its menu; /tour works
    (no 'Page not found')."""
    proc, url = start_server(tmp_path / "stderr.txt")
    try:
        pg = browser.new_page(viewport={"width": 1280, "height": 800})
        pg.goto(f"{url}/scheduler")
        wait_drawn(pg)
        links = pg.locator("[data-testid=stTopNavLink]")
        assert links.count() >= 6 and "Scheduler" in pg.inner_text("h1")
        pg.goto(f"{url}/tour")
        wait_drawn(pg)
        assert pg.get_by_text("Page not found").count() == 0 and "/tour" in pg.url
        assert pg.locator("[data-testid=stTopNavLink]").count() >= 6
        pg.close()
    finally:
        proc.terminate()
        proc.wait(timeout=seconds(20))
