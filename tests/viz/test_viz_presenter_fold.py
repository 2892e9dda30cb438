"""Presenter mode's folding on the Eviction lab, Live, Classroom and Scheduler trees (#24 item 4):
each page's scene builder, given the presenter's view size, folds through viz/scene.py's one
fit_tree_scene until every label keeps 14 px. Known answers on small inputs, no browser.

The views (pages/_shell.py's presenter_tree_px): the tree's column is 0.6 of a 1,100 px
page less one 16 px gap, 650.4 px wide; tree_height(h) is h x 1.15 tall. At 14 px labels (edge
labels are 9 scene units) a scene fits when (width + 16) x 14 / 9 <= 650.4, i.e. it is at most
402.1 units wide.
"""

from __future__ import annotations

from pages._room_view import fitted_scene
from radix.tree.radix_cache import RadixCache
from scenarios.eviction import run_eviction
from scenarios.scheduler import sort_queue
from viz.eviction import drawn_conversations, lab_frame
from viz.fold import fits, fold_tree
from viz.live import live_scene
from viz.scene import fit_tree_scene, tree_scene
from viz.scheduler import match_scene
from viz.timeline import Timeline

WIDE = (1_100 - 16) * 0.6  # 650.4 px


def _fit(height: int) -> tuple[float, float, float]:
    return WIDE, height * 1.15, 14.0


def _ids(scene: dict) -> list[str]:
    return [n["id"] for n in scene["nodes"]]


def _node(scene: dict, ident: str) -> dict:
    return next(n for n in scene["nodes"] if n["id"] == ident)


def _fan(n: int) -> RadixCache:
    """A root with n children: child i (i = 1..n) holds i tokens [i, 0, 0, ...], node id i."""
    c = RadixCache()
    for i in range(1, n + 1):
        c.insert([i] + [0] * (i - 1))
    return c


def test_eviction_lab_folds_to_rag_the_picked_leaf_and_the_summary():
    """Default state (400 conversations, the 16 oldest finished: ids 3..18), mru, frame 1: the
    pick of conv-015 (#18). Unfolded (LR, RAG + 8 conversations + summary) it is 618 units
    wide, too wide for the 650.4 x 460 px view. Folded (top-down): root, S, RAG, #18 (role
    evicted) and S's summary: 401 children - RAG - #18 = 399 folded, 384 live (locked) and
    16 - 1 = 15 finished (evictable leaves), one count a line. Frame 0 draws #18 too (first in
    drawn_conversations' pop order), so the pick and the pop animate in place."""
    run = run_eviction("mru")
    tl = Timeline(run.log)
    fit = _fit(400)
    whole = lab_frame(run, tl, 1).scene
    assert (whole["rankdir"], len(whole["nodes"])) == ("LR", 12) and not fits(whole, *fit)
    scene = lab_frame(run, tl, 1, fit).scene
    assert fits(scene, *fit) and scene["rankdir"] == "TB"
    assert _ids(scene) == ["n0", "n2", "n1", "n18", "m2"]
    # the page's presenter view is 345 px tall (tree_height(300): its numbers row above the
    # fold); the folded scene is the same
    assert lab_frame(run, tl, 1, (WIDE, 345.0, 14.0)).scene == scene
    assert _node(scene, "n18")["role"] == "evicted"
    assert _node(scene, "m2")["label"] == "+399 more\n384 locked\n15 evictable leaves"
    assert _ids(lab_frame(run, tl, 0, fit).scene) == _ids(scene)


def test_eviction_lab_folds_just_enough_for_a_wider_view():
    """Same frame, wider views fold less: at 846 px 4 children a node fit (RAG and #18, #17,
    #16, the first three in drawn_conversations' pop order); at 1,301 px 8 a node (RAG and 7
    conversations); at 1,951 px all 8 drawn conversations and RAG, as without a fit."""
    run = run_eviction("mru")
    tl = Timeline(run.log)
    assert drawn_conversations(run)[:3] == [18, 17, 16]
    four = lab_frame(run, tl, 1, (846.0, 460.0, 14.0)).scene
    assert sorted(_ids(four)) == sorted(["n0", "n2", "n1", "n18", "n17", "n16", "m2"])
    eight = lab_frame(run, tl, 1, (1_301.0, 460.0, 14.0)).scene
    assert len(_ids(eight)) == 3 + 7 + 1 and fits(eight, 1_301.0, 460.0, 14.0)
    every = lab_frame(run, tl, 1, (1_951.0, 460.0, 14.0)).scene
    assert {f"n{i}" for i in drawn_conversations(run)} <= set(_ids(every))


def test_live_scene_folds_to_fit_and_keeps_the_selection():
    """20 leaves of 1..20 tokens ("20 tok" newline "[20 0 0 0 0…]" under each), the Live view
    650.4 x 391 px: 12 a node (the page's default) and 2 a node are too wide at 14 px, so one
    child a node is drawn, the largest (#20), and 19 fold into "+19 more"; drawn + folded =
    21. A selected leaf (#1, the smallest) is kept beside it."""
    snap = _fan(20).snapshot()
    fit = _fit(340)
    assert not fits(tree_scene(snap, max_children=2), *fit)
    scene, drawn, folded = live_scene(snap, None, None, 12, fit)
    assert _ids(scene) == ["n0", "n20", "m0"] and (drawn, folded) == (2, 19)
    assert _node(scene, "m0")["label"] == "+19 more\n19 evictable leaves" and fits(scene, *fit)
    scene, drawn, folded = live_scene(snap, None, 1, 12, fit)
    assert _ids(scene) == ["n0", "n1", "n20", "m0"] and (drawn, folded) == (3, 18)
    assert _node(scene, "n1")["role"] == "selected"
    assert live_scene(snap, None, None, 12)[1:] == (13, 8)  # no fit: as before


def test_classroom_presenter_scene_is_built_once_per_version():
    """The Classroom's shared view keeps its snapshot; a presenter's folded tree is
    live_scene's with the fit, built by the first presenter and reused by the next; another
    view size rebuilds it."""
    shared = {"snapshot": _fan(20).snapshot(), "decode": None}
    fit = _fit(320)
    first = fitted_scene(shared, fit)
    assert first == live_scene(shared["snapshot"], None, None, 12, fit)[0]
    assert fitted_scene(shared, fit) is first
    wider = fitted_scene(shared, (2_000.0, 368.0, 14.0))
    assert wider is not first and len(wider["nodes"]) > len(first["nodes"])


def test_scheduler_match_scene_draws_its_small_tree_whole_and_the_path():
    """LPM, 24 waiting: the tree is root -> S (#6, 512 tok) -> F (#2, 1,543) -> four histories
    (#1 120, #3 260, #4 400, #5 610 tok), plus #7 (50 tok) under S: 8 nodes, 516 units wide,
    too wide for the Scheduler's presenter view, 650.4 x 405 px (pages/scheduler.py). A tree
    of at most 16 nodes is drawn whole (issue 41: folding it hid the lesson) and the view
    scrolls at 14 px: q021 (first offered) matches #6, #2, #5, drawn as matched; q000 (cold)
    matches nothing."""
    sort = sort_queue("lpm", 24, 32, 32)
    fit = (WIDE, 405.0, 14.0)
    warm = match_scene(sort.tree, sort.prompts["q021"], fit)
    assert sorted(_ids(warm)) == sorted(f"n{i}" for i in range(8)) and not fits(warm, *fit)
    assert [_node(warm, i)["role"] for i in ("n6", "n2", "n5")] == ["matched"] * 3
    cold = match_scene(sort.tree, sort.prompts["q000"], fit)
    assert _ids(cold) == _ids(warm) and {n["role"] for n in cold["nodes"]} == {""}


def test_prefer_ranks_after_keep_and_before_size():
    """A root with 10 children of 1..10 tokens, 3 a node: by size 10, 9, 8; prefer [2, 5]
    puts 2 and 5 first, then the largest (10); kept 7 comes before both: 7, 2, 5."""
    snap = _fan(10).snapshot()
    assert fold_tree(snap, 3).drawn == {0, 10, 9, 8}
    assert fold_tree(snap, 3, prefer=[2, 5]).drawn == {0, 2, 5, 10}
    assert fold_tree(snap, 3, keep=[7], prefer=[2, 5]).drawn == {0, 7, 2, 5}


def test_tour_lock_walk_draws_every_locked_node():
    """The Tour's multi-turn walk, u000-t5's inc_lock_ref (step 22: its first line names node
    6; events 1-5 lock #6, #5, #4, #1, #2 in turn) and dec_lock_ref (step 24), in the Tour's
    presenter view (650.4 x 385 px): every node of the 7-node tree is its own box in every
    frame, each locked node saying r=1 (issue 41: at event 5 the fold showed root, #2 and
    "+2 more (5 nodes) / 1 locked" while 4 hidden nodes had lock_ref 1; at event 0 node 6,
    which the sentence names, was folded away). Step 22's first frame outlines #6 ("named");
    at event 5 five boxes say r=1; the tree is taller than the view, which scrolls."""
    from scenarios.tour import run_tour

    run = run_tour("multi-turn")
    tl = Timeline(run.log)
    fit = _fit(335)
    for step in (22, 24):
        for k in range(0, 6):
            frame = tl.frame(step, k)
            scene = fit_tree_scene(frame.snapshot, *fit, highlight=dict(frame.highlight),
                                   keep=sorted(frame.named))
            ids = _ids(scene)
            assert sorted(ids) == sorted(f"n{n.id}" for n in frame.snapshot.nodes), (step, k)
            locked = [n for n in frame.snapshot.nodes if n.lock_ref > 0 and n.parent is not None]
            assert all(f"r={n.lock_ref}" in _node(scene, f"n{n.id}")["label"] for n in locked)
            assert {f"n{i}" for i in frame.named} <= set(ids)
    first = tl.frame(22, 0)
    assert first.named == {6} and first.highlight == {6: "named"}
    fifth = fit_tree_scene(tl.frame(22, 5).snapshot, *fit, highlight={2: "lock"})
    assert sum("r=1" in n["label"] for n in fifth["nodes"]) == 5 and not fits(fifth, *fit)


def test_a_big_trees_fold_keeps_locked_paths_and_named_nodes():
    """A root with 20 one-token leaves (#1..#20) and a path of 12 below leaf #20's sibling
    branch: 33 nodes, folded for a 650.4 x 483 px view. #25 is locked (its path #21..#25 has
    lock_ref 1), #3 is named by the sentence (`keep`), #32 highlighted: each of those and their
    ancestors stays a box of its own, the other leaves fold into "+K more", and the unlocked
    run #26..#31 above #32 becomes one chain box (never a locked or highlighted node)."""
    c = RadixCache()
    for i in range(1, 21):
        c.insert([1000 + i])
    for k in range(1, 13):
        c.insert(list(range(1, k + 1)))
    snap = c.snapshot()
    path = [n.id for n in snap.nodes if n.token_ids and n.token_ids[0] < 1000]
    assert len(snap.nodes) == 33 and path == list(range(21, 33))
    c.inc_lock_ref(_node_of(c, 25))
    snap = c.snapshot()
    assert [n.id for n in snap.nodes if n.lock_ref and n.parent is not None] == [21, 22, 23, 24,
                                                                                25]
    scene = fit_tree_scene(snap, WIDE, 483.0, 14.0, highlight={32: "new"}, keep=[3])
    ids = _ids(scene)
    assert {f"n{i}" for i in (0, 3, 21, 22, 23, 24, 25, 32)} <= set(ids)
    assert any(i.startswith("m") for i in ids) and "c26" in ids
    assert _node(scene, "c26")["label"] == "#26 … #31\n6 nodes, r=0"
    assert all("r=1" in _node(scene, f"n{i}")["label"] for i in range(21, 26))


def _node_of(c: RadixCache, node_id: int):
    """The live TreeNode `node_id` of cache `c` (a depth-first search from the root)."""
    stack = [c.root_node]
    while stack:
        n = stack.pop()
        if n.id == node_id:
            return n
        stack.extend(n.children.values())
    raise KeyError(node_id)


def test_host_tier_trees_fit_the_presenter_view():
    """The host tier walk's trees (scenarios/hosttier.py, the Eviction lab's section and the
    Tour's walk) in presenter mode's 240 px view (pages/_shell.py's tier_tree_height): every
    frame fits at 14 px labels. The four frames with a root and two levels (134 units:
    (134 + 16) x 14 / 9 = 233 px) did not in the old 220 px view, which panned them."""
    from scenarios.hosttier import run_frames
    from viz.hosttier import tier_scene

    scenes = [tier_scene(f.nodes, f.moved, f.event) for f in run_frames()]
    assert all(fits(s, WIDE, 240, 14.0) for s in scenes)
    assert [i for i, s in enumerate(scenes) if not fits(s, WIDE, 220, 14.0)] == [6, 7, 8, 9]


def _path(depth: int) -> RadixCache:
    """root > #1 > #2 > ... > #depth, each edge 10 tokens: insert i extends the path by
    [10(i-1)+1 .. 10i], a new child of the last node (node id i)."""
    c = RadixCache()
    for k in range(1, depth + 1):
        c.insert(list(range(1, 10 * k + 1)))
    return c


def test_a_step_that_highlights_a_whole_deep_path_scrolls_instead_of_folding_it():
    """The Trace debugger's presenter view, 650.4 x 483 px (pages/_trace_view.py:
    presenter_tree_px(0.6, tree_height(420)), 420 x 1.15 = 483): a scene fits at 14 px when it
    is at most 483 x 9 / 14 - 16 = 294.5 units tall. A step that locks root > #1 > ... > #10
    (all ten highlighted "lock") draws 11 ranks, 680 units tall. No fold may hide a node the
    step touched (#24 drew #1..#9 as one "9 nodes" box, issue 41 asks for every one): each is
    its own box of role lock, and the view scrolls at 14 px instead."""
    snap = _path(10).snapshot()
    lock = {i: "lock" for i in range(1, 11)}
    fit = (WIDE, 483.0, 14.0)
    scene = fit_tree_scene(snap, *fit, highlight=lock, rankdir="TB", max_children=12)
    assert _ids(scene) == [f"n{i}" for i in range(11)] and scene["height"] == 680.0
    assert not fits(scene, *fit)
    assert {_node(scene, f"n{i}")["role"] for i in range(1, 11)} == {"lock"}


def test_small_classroom_and_live_trees_are_drawn_whole():
    """A room's tree: a 40-token shared system prompt and nine questions of 12 tokens under it,
    11 nodes with the root, their text as edge labels. At 14 px it is wider than the
    Classroom's presenter view (650.4 x 368 px) and Live's (650.4 x 330): issue 41 saw such a
    tree folded to "+3 more (10 nodes)", the questions hidden. A tree of at most 16 nodes is
    drawn whole, every question its own box, and the view scrolls."""
    c = RadixCache()
    system = list(range(40))
    for q in range(9):
        c.insert(system + [100 + 12 * q + k for k in range(12)])
    snap = c.snapshot()
    assert len(snap.nodes) == 11

    def decode(ids):
        return "".join(chr(97 + i % 26) for i in ids)

    for fit in (_fit(320), (WIDE, 330.0, 14.0)):
        scene = live_scene(snap, decode, None, 12, fit)[0]
        assert sorted(_ids(scene)) == sorted(f"n{n.id}" for n in snap.nodes)
        assert not fits(scene, *fit)
