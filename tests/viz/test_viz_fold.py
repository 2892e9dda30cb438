"""viz/fold.py's folding of wide and deep trees (known answers for what is drawn and counted), and
the Trace debugger's helpers for big trees (step highlight, pretty_print cut)."""

from __future__ import annotations

import pytest

from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog
from viz.fold import fits, fold_tree
from viz.live import live_scene
from viz.roles import step_highlight
from viz.scene import fit_tree_scene, tree_scene
from viz.trace import text_head


def _fan(n: int = 100) -> RadixCache:
    """A root with n children: child i (i = 1..n) holds i tokens [i, 0, 0, ...], node id i."""
    c = RadixCache()
    for i in range(1, n + 1):
        c.insert([i] + [0] * (i - 1))
    return c


def _drawn(scene: dict) -> list[str]:
    return [n["id"] for n in scene["nodes"]]


def _label(scene: dict, ident: str) -> str:
    return next(n["label"] for n in scene["nodes"] if n["id"] == ident)


def _edge(scene: dict, ident: str) -> dict:
    return next(e for e in scene["edges"] if e["id"] == ident)


def test_fan_of_100_draws_12_and_one_summary():
    """max_children=12: the 12 largest (100..89 tokens) are drawn, the other 88 fold into
    "m0": 1 + 2 + ... + 88 = 88 x 89 / 2 = 3,916 tokens, all 88 evictable leaves, none locked."""
    snap = _fan().snapshot()
    plan = fold_tree(snap, max_children=12)
    assert plan.drawn == frozenset([0, *range(89, 101)])
    [fold] = plan.folds
    assert fold == (0, 88, 88, 3_916, 0, 88)
    scene = tree_scene(snap, max_children=12)
    assert len(_drawn(scene)) == 1 + 12 + 1 and _drawn(scene)[-1] == "m0"
    assert _label(scene, "m0") == "+88 more\n88 evictable leaves"
    assert (_edge(scene, "em0")["source"], _edge(scene, "em0")["label"]) == ("n0", "3,916 tok")


def test_highlighted_and_locked_children_come_first():
    """Child 5 (5 tokens, far from the top 12) is highlighted: drawn, and the 11 largest
    (100..90) fill the rest; 88 fold: 3,916 - 5 + 89 = 4,000 tokens. Locking child 7 as well
    puts it before the large ones: 5, 7 and 100..91 drawn; the fold counts 87 and no lock.
    max_children=2: only 5 and 7; 98 fold with 1 + ... + 100 - 5 - 7 = 5,038 tokens."""
    c = _fan()
    scene = tree_scene(c.snapshot(), highlight={5: "new"}, max_children=12)
    assert set(_drawn(scene)) == {"n0", "n5", *(f"n{i}" for i in range(90, 101)), "m0"}
    assert _edge(scene, "em0")["label"] == "4,000 tok"
    c.inc_lock_ref(c.match_prefix([7] + [0] * 6).last_node)
    plan = fold_tree(c.snapshot(), max_children=12, keep=[5])
    assert plan.drawn == frozenset([0, 5, 7, *range(91, 101)])
    assert plan.folds[0].locked == 0
    locked = fold_tree(c.snapshot(), max_children=2, keep=[5])
    assert locked.drawn == {0, 5, 7} and locked.folds[0][1:5] == (98, 98, 5_050 - 12, 0)


def test_ids_stable_across_a_step():
    """A new 1-token leaf (id 101) is the smallest: it folds, the drawn ids do not move and the
    summary keeps its id m0, now +89. Highlighted as just inserted, it is drawn and takes the
    place of the 12th largest (89 tokens), which folds: still 12 + 1 boxes under the root."""
    c = _fan()
    before = _drawn(tree_scene(c.snapshot(), max_children=12))
    c.insert([1000])
    after = tree_scene(c.snapshot(), max_children=12)
    assert _drawn(after) == before and _label(after, "m0").startswith("+89 more")
    shown = _drawn(tree_scene(c.snapshot(), highlight={101: "new"}, max_children=12))
    assert shown == ["n0", *(f"n{i}" for i in range(90, 102)), "m0"]


def test_depth_cap_and_deep_counts():
    """A chain 1 -> 2 -> 3 under the root ([1,2,3] then [1,2,3,4,5] then [1,2,3,4,5,6], node
    ids by insert), max_depth=1: the root and node 1 drawn, "m1" folds 2 nodes of 3 tokens.
    A kept deep node pulls its whole path in. One leftover child is drawn, not folded."""
    c = RadixCache()
    c.insert([1, 2, 3])
    c.insert([1, 2, 3, 4, 5])
    c.insert([1, 2, 3, 4, 5, 6])
    snap = c.snapshot()
    plan = fold_tree(snap, max_depth=1)
    assert plan.drawn == {0, 1} and plan.folds[0] == (1, 1, 2, 3, 0, 1)
    assert _label(tree_scene(snap, max_depth=1), "m1").startswith("+1 more (2 nodes)")
    assert fold_tree(snap, max_depth=1, keep=[3]).drawn == {0, 1, 2, 3}
    assert fold_tree(_fan(13).snapshot(), max_children=12).folds == ()
    assert fold_tree(snap).folds == () and len(fold_tree(snap).drawn) == 4
    with pytest.raises(ValueError, match="max_children"):
        fold_tree(snap, max_children=0)


def test_step_highlight_and_text_head():
    """insert [1,2,3] then [1,2,4]: the second step splits node 1 (prefix 2) and grows leaf 3;
    its HitCounted also names 2 and 3, but split and new outrank matched. The root never
    shows. 1,000 lines cut to 200 with a note; 200 lines stay whole."""
    log = EventLog()
    c = RadixCache(sink=log)
    c.insert([1, 2, 3])
    c.insert([1, 2, 4])
    last = log.num_steps - 1
    assert step_highlight(log.events_of(last), log.snapshot_at(last + 1)) == {
        1: "split", 2: "split", 3: "new"}
    c.match_prefix([1, 2, 4])
    step = log.num_steps - 1
    assert step_highlight(log.events_of(step), log.snapshot_at(step + 1)) == {
        2: "matched", 3: "matched"}
    head, note = text_head("\n".join(str(i) for i in range(1_000)))
    assert head.splitlines()[-1] == "199" and note.startswith("first 200 of 1,000 lines")
    assert text_head("a\nb", 2) == ("a\nb", None)


def test_live_scene_folds_and_keeps_the_selection():
    """20 leaves of 1..20 tokens, 12 per node: the root and 12 leaves drawn, 20 - 12 = 8
    folded. Selecting leaf 1 (the smallest) draws it, outlined, in place of leaf 9."""
    snap = _fan(20).snapshot()
    scene, drawn, folded = live_scene(snap, None, None)
    assert (drawn, folded) == (13, 8) and _label(scene, "m0").startswith("+8 more")
    scene, drawn, folded = live_scene(snap, None, 1)
    assert (drawn, folded) == (13, 8)
    assert "n1" in _drawn(scene) and "n9" not in _drawn(scene)
    assert next(n for n in scene["nodes"] if n["id"] == "n1")["stroke"] == "#000000"


def test_fits_is_the_padded_scene_at_the_label_scale():
    """A 200 x 100 scene at 14 px labels (edge labels are 9 units: scale 14 / 9): (200 + 16) x
    14 / 9 = 336 px wide, (100 + 16) x 14 / 9 = 180.4 px tall."""
    scene = {"width": 200, "height": 100}
    assert fits(scene, 336, 181, 14) and not fits(scene, 335, 181, 14)
    assert not fits(scene, 336, 180, 14)


def test_presenter_fit_folds_just_enough_and_keeps_the_highlight():
    """A root with 20 children (child i holds i tokens): unfolded it is wider than a 500 x 400
    px view at 14 px labels, so children fold (8, 4, 2, 1 per node, in turn) until it fits: the
    result fits, the highlighted child 3 (small: never among the largest) is drawn with its role,
    the rest fold into "m0", and the step before (twice the children) does not fit. A view
    big enough for all of it gets the tree unfolded."""
    snap = _fan(20).snapshot()
    whole = fit_tree_scene(snap, 10_000, 10_000, 14, highlight={3: "new"})
    assert len(_drawn(whole)) == 21 and fits(whole, 10_000, 10_000, 14)
    assert not fits(whole, 500, 400, 14)
    scene = fit_tree_scene(snap, 500, 400, 14, highlight={3: "new"})
    assert fits(scene, 500, 400, 14) and "m0" in _drawn(scene)
    assert next(n for n in scene["nodes"] if n["id"] == "n3")["role"] == "new"
    shown = len([i for i in _drawn(scene) if i.startswith("n")]) - 1  # children, not the root
    wider = tree_scene(snap, highlight={3: "new"}, max_children=shown * 2)
    assert shown < 8 and not fits(wider, 500, 400, 14)


def test_presenter_fit_caps_depth_when_one_child_a_node_is_still_too_tall():
    """A chain of 8 nodes (each insert extends the last by 2 tokens), 9 ranks with the root:
    a rank is 66 units (a 20-unit box, two 12-unit gaps, a 22-unit two-line edge label), so
    nodes down to depth 4 plus the stub are 352 units tall: (352 + 16) x 14 / 9 = 572 px, over
    a 500 px view; down to depth 3, 286 units: 470 px, inside. So nodes 0-3 are drawn and 4-8
    fold into "+1 more (5 nodes)" under node 3; the highlighted node 2 is among those drawn
    (`whole_below=0`: a tree of 9 nodes is otherwise drawn whole, in a scrolling view)."""
    c = RadixCache()
    for n in range(1, 9):
        c.insert(list(range(2 * n)))
    snap = c.snapshot()
    assert len(snap.nodes) == 9
    scene = fit_tree_scene(snap, 600, 500, 14, highlight={2: "new"}, whole_below=0)
    assert fits(scene, 600, 500, 14)
    assert _drawn(scene) == ["n0", "n1", "n2", "n3", "m3"]
    assert _label(scene, "m3").startswith("+1 more (5 nodes)")


def test_presenter_fit_draws_a_deep_highlights_ancestors_as_one_chain_box():
    """The same chain of 8, the deepest node highlighted (a lock walk's first hop): with every
    ancestor drawn, 9 ranks are 9 x 66 - 46 = 548 units, 877 px at 14 px labels, over the
    500 px view, and no depth cap may fold a highlighted node's ancestors. So nodes 1-7 become
    one box "c1" ("#1 … #7", "7 nodes, r=0"; its edge 7 x 2 = 14 tokens) with node 8 below
    it: 154 units, 264 px. Highlighting node 5 instead: nodes 1-4 in the box, node 5 and its
    child 6 drawn, 7-8 folded under 6 into a one-line "+1 more (2 nodes)" (its counts in the
    tooltip)."""
    c = RadixCache()
    for n in range(1, 9):
        c.insert(list(range(2 * n)))
    snap = c.snapshot()
    scene = fit_tree_scene(snap, 600, 500, 14, highlight={8: "lock"}, whole_below=0)
    assert fits(scene, 600, 500, 14) and scene["height"] == 154.0
    assert _drawn(scene) == ["n0", "c1", "n8"]
    assert _label(scene, "c1") == "#1 … #7\n7 nodes, r=0"
    assert (_edge(scene, "ec1")["source"], _edge(scene, "ec1")["label"]) == ("n0", "14 tok")
    assert _edge(scene, "e8")["source"] == "c1"
    scene = fit_tree_scene(snap, 600, 500, 14, highlight={5: "lock"}, whole_below=0)
    assert fits(scene, 600, 500, 14)
    assert _drawn(scene) == ["n0", "c1", "n5", "n6", "m6"]
    assert _label(scene, "c1") == "#1 … #4\n4 nodes, r=0"
    assert _label(scene, "m6") == "+1 more (2 nodes)"
    stub = next(n for n in scene["nodes"] if n["id"] == "m6")
    assert stub["tooltip"].endswith("; 1 evictable leaves")
    # without the chain the same caps do not fit: the chain is what makes it fit
    assert not fits(tree_scene(snap, highlight={5: "lock"}, max_children=1, max_depth=1),
                    600, 500, 14)


def test_chain_box_keeps_its_last_nodes_children_and_counts_the_ones_it_hides():
    """The chain of 8 with two more branches off node 4 (#9 and #10, 2 tokens each). Node 8
    highlighted: #1-#7 are one box, and #9 and #10 (children of #4, inside the run) are left
    out, counted in its tooltip. Node 5 highlighted: the run is #1-#4, and #4's other children
    fold into "+2 more" hanging from the chain box (edge "em4" from "c1"), beside #5."""
    c = RadixCache()
    for n in range(1, 9):
        c.insert(list(range(2 * n)))
    c.insert([*range(8), 99, 98])
    c.insert([*range(8), 97, 96])
    snap = c.snapshot()
    scene = fit_tree_scene(snap, 600, 500, 14, highlight={8: "lock"}, whole_below=0)
    assert _drawn(scene) == ["n0", "c1", "n8"]
    chain = next(n for n in scene["nodes"] if n["id"] == "c1")
    assert chain["tooltip"].endswith("14 tokens; not drawn beside them: 2 node(s)")
    scene = fit_tree_scene(snap, 600, 500, 14, highlight={5: "lock"}, whole_below=0)
    assert fits(scene, 600, 500, 14)
    assert _drawn(scene) == ["n0", "c1", "n5", "n6", "m4", "m6"]
    assert (_edge(scene, "em4")["source"], _label(scene, "m4")) == ("c1", "+2 more")
