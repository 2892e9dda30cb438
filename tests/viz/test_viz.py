"""viz/: the scene's ids and labels, the layout, the DOT download, the timeline, the words."""

from __future__ import annotations

import pytest

from radix import events as ev
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog
from viz.component import view_data
from viz.dot import dot_to_svg, tree_dot
from viz.layout import place
from viz.live import lock_walk_line
from viz.roles import ROLES, step_roles
from viz.scene import match_path, token_preview, tree_items, tree_scene
from viz.timeline import Timeline
from viz.words import node_line, slot_ranges


def _ids(scene: dict) -> tuple[set[str], dict[str, tuple[str, str]]]:
    return ({n["id"] for n in scene["nodes"]},
            {e["id"]: (e["source"], e["target"]) for e in scene["edges"]})


def _centres(scene: dict) -> dict[str, tuple[float, float]]:
    return {n["id"]: (n["x"], n["y"]) for n in scene["nodes"]}


def test_scene_split_keeps_ids():
    """insert [1,2,3] then [1,2,4]: node 1 ([1,2,3]) splits after 2 tokens; the new prefix node
    2 takes edge e2 from the root, node 1 keeps its id and edge id e1, now under node 2, and
    the new leaf 3 ([4]) hangs under node 2. Labels: 2 tok / 1 tok / 1 tok."""
    c = RadixCache()
    c.insert([1, 2, 3])
    before = tree_scene(c.snapshot())
    c.insert([1, 2, 4])
    after = tree_scene(c.snapshot())
    assert _ids(before) == ({"n0", "n1"}, {"e1": ("n0", "n1")})
    nodes, edges = _ids(after)
    assert nodes == {"n0", "n1", "n2", "n3"}
    assert edges == {"e2": ("n0", "n2"), "e1": ("n2", "n1"), "e3": ("n2", "n3")}
    labels = {e["id"]: e["label"] for e in after["edges"]}
    assert labels["e2"] == "2 tok\n[1 2]" and labels["e1"] == "1 tok\n[3]"


def test_scene_labels_lock_and_evictable():
    """Locked: r=1, filled blue, not dashed; unlocked leaf: r=0, green, dashed; a highlight
    sets the pen of its role; an unknown role is refused."""
    c = RadixCache()
    c.insert([1, 2, 3])
    m = c.match_prefix([1, 2, 3])
    c.inc_lock_ref(m.last_node)
    node = tree_scene(c.snapshot())["nodes"][1]
    assert (node["label"], node["fill"], node["dashed"]) == ("#1  r=1", "#dbe8f6", False)
    c.dec_lock_ref(m.last_node)
    node = tree_scene(c.snapshot(), highlight={1: "evicted"})["nodes"][1]
    assert (node["label"], node["dashed"], node["stroke"], node["role"]) == (
        "#1  r=0", True, ROLES["evicted"][0], "evicted")
    with pytest.raises(ValueError, match="unknown highlight role"):
        tree_items(c.snapshot(), highlight={1: "glow"})


def test_token_preview_cuts():
    assert token_preview([5, 6], None) == "[5 6]"
    assert token_preview(list(range(100)), None, max_chars=10) == "[0 1 2 3…]"
    assert token_preview([1], lambda ids: "x" * 40, max_chars=5) == repr("xxxxx…")


def test_layout_root_and_one_child():
    """The worked example of `place`: band 61.7 + 10 = 71.7 px, both centres at x = 35.9
    (35.85 rounded); y = 10 (root box 20 / 2) and 20 + 2 x 12 + 22 + 10 = 76; the edge label
    sits between: 76 - 10 - 12 - 11 = 43."""
    c = RadixCache()
    c.insert([1, 2, 3])
    scene = tree_scene(c.snapshot())
    assert _centres(scene) == {"n0": (35.9, 10.0), "n1": (35.9, 76.0)}
    assert (scene["width"], scene["height"]) == (71.7, 86.0)
    [edge] = scene["edges"]
    assert (edge["label"], edge["label_x"], edge["label_y"]) == ("3 tok\n[1 2 3]", 35.9, 43.0)
    node1 = scene["nodes"][1]
    assert (node1["label"], node1["fill"], node1["stroke"], node1["stroke_width"],
            node1["dashed"]) == ("#1  r=0", "#e3f4e1", "#555555", 1.0, True)


def test_layout_split_on_the_right_keeps_the_left_in_place():
    """Root children [1,2,3] (left, child key 1) and [5,6] (right); inserting [5,7] splits the
    right one: its subtree gets a rank and a band more, the left leaf does not move at all."""
    c = RadixCache()
    c.insert([1, 2, 3])
    c.insert([5, 6])
    before = _centres(tree_scene(c.snapshot()))
    c.insert([5, 7])
    after = _centres(tree_scene(c.snapshot()))
    assert set(after) - set(before) == {"n3", "n4"}
    assert after["n1"] == before["n1"]
    assert after["n2"][1] > before["n2"][1]  # the split node's old half moved down a rank
    assert after["n3"][1] == before["n2"][1]  # the new prefix node took its rank


def test_layout_lr_and_signature():
    """rankdir=LR swaps the axes (depth along x); the signature follows the scene, so the
    browser skips a rerun that sends the same tree."""
    c = RadixCache()
    c.insert([7, 8])
    scene = tree_scene(c.snapshot(), decode=lambda ids: 'say "hi"', rankdir="LR")
    (x0, y0), (x1, y1) = _centres(scene).values()
    assert scene["rankdir"] == "LR" and x1 > x0 and y1 == y0
    assert scene["edges"][0]["label"] == "2 tok\n'say \"hi\"'"
    other = tree_scene(c.snapshot(), rankdir="LR")
    assert view_data(scene)["sig"] == view_data(scene)["sig"] != view_data(other)["sig"]
    with pytest.raises(ValueError, match="rankdir"):
        place([], [], "BT")


def test_layout_cycle_is_laid_out_once():
    """a -> b -> a: b's first edge makes it a's child, so no root is left; a, the first node no
    root reaches, becomes one, b hangs under it and both edges are still drawn."""
    from viz.layout import Box, Line

    boxes = [Box(n, n, "#fff", "#000", 1.0, False, "", "") for n in "ab"]
    lines = [Line("x", "a", "b", "", "#000", 1.0), Line("y", "b", "a", "", "#000", 1.0)]
    scene = place(boxes, lines)
    assert [n["id"] for n in scene["nodes"]] == ["a", "b"] and len(scene["edges"]) == 2


def test_dot_download_matches_the_scene_and_renders():
    """The DOT for the download has the same ids, labels and styles, through the graphviz
    package; a quote and a newline in a label stay text; Graphviz's dot lays it out."""
    c = RadixCache()
    c.insert([1, 2, 3])
    dot = tree_dot(c.snapshot(), decode=lambda ids: 'say "hi"\nnow', highlight={1: "new"})
    assert "n0 -> n1" in dot and "id=e1" in dot and 'style="filled,rounded,dashed"' in dot
    assert '\\"hi\\"' in dot and f'color="{ROLES["new"][0]}"' in dot
    svg = dot_to_svg(dot)
    assert svg.lstrip().startswith("<?xml") and 'id="n1"' in svg


def test_match_path_reads_the_snapshot():
    """[1,2,3] and [1,2,4] cached: a match of [1,2,4,9] walks node 2 ([1,2]) then 3 ([4]);
    [1,9] ends inside node 2; [7] matches nothing."""
    c = RadixCache()
    c.insert([1, 2, 3])
    c.insert([1, 2, 4])
    snap = c.snapshot()
    assert match_path(snap, [1, 2, 4, 9]) == [2, 3]
    assert match_path(snap, [1, 9]) == [2] and match_path(snap, [7]) == []


def test_timeline_eviction_frame_shows_then_removes():
    log = EventLog()
    c = RadixCache(sink=log)
    c.insert([1, 2, 3])
    c.insert([4, 5])
    c.evict(1)  # the older leaf [1,2,3] goes first
    tl = Timeline(log)
    step = tl.num_steps - 1
    ks = [k for k in range(1, tl.num_micro(step) + 1)
          if "evicted" in tl.frame(step, k).highlight.values()]
    shown = tl.frame(step, ks[0])
    assert shown.highlight == {1: "evicted"} and 1 in shown.snapshot.by_id()
    assert "evict pops leaf #1 (3 tokens)" in shown.narration
    assert 1 not in tl.frame(*tl.next(step, ks[0])).snapshot.by_id()


def test_timeline_cursor_walks_every_frame_both_ways():
    from scenarios.tour import run_tour

    tl = Timeline(run_tour().log)
    forward = [(0, 0)]
    while tl.next(*forward[-1]) != forward[-1]:
        forward.append(tl.next(*forward[-1]))
    backward = [forward[-1]]
    while tl.prev(*backward[-1]) != backward[-1]:
        backward.append(tl.prev(*backward[-1]))
    assert backward[::-1] == forward
    assert len(forward) == tl.num_steps + 1 + sum(tl.num_micro(s) for s in range(tl.num_steps))
    with pytest.raises(IndexError):
        tl.frame(tl.num_steps + 1)


def test_scrub_10000_step_log_replays_at_most_a_keyframe_interval(monkeypatch):
    """10,000 steps (inserts of 200 keys sharing prefixes, matches, evictions), keyframe every
    64: any frame applies at most 64 steps (63 from the keyframe + the frame's own micro-events)
    and equals the log's own replay. The worst case is just before a keyframe: step 63 + 64 j
    replays 63 steps. The time is measured by benchmarks/timeline_scrub.py, not here."""
    from radix.tree.replay import TreeModel

    log = EventLog(keyframe_every=64)
    c = RadixCache(sink=log)
    i = 0
    while log.num_steps < 10_000:
        c.insert([i % 7, i % 13, i % 200, i])
        c.match_prefix([i % 7, i % 13])
        if i % 50 == 49:
            c.evict(40)
        i += 1
    tl = Timeline(log)
    applied = []
    plain_apply_all = TreeModel.apply_all

    def counting(self, events):
        applied.append(1)
        plain_apply_all(self, events)

    monkeypatch.setattr(TreeModel, "apply_all", counting)
    for step in (9_999, 5_055, 63, 7_000, 127):
        applied.clear()
        f = tl.frame(step, tl.num_micro(step))
        assert len(applied) == step % 64 + 1  # the steps since the keyframe, then this step's
        assert len(applied) <= log.keyframe_every
        monkeypatch.setattr(TreeModel, "apply_all", plain_apply_all)
        whole = log.snapshot_at(step + 1)  # the step played in full
        monkeypatch.setattr(TreeModel, "apply_all", counting)
        assert {n.id for n in f.snapshot.nodes} >= {n.id for n in whole.nodes}


def test_words_roles_lock_walk_and_slots():
    """A step's strongest role wins (new over matched); a lock walk reads as one line; slots
    read as ranges (a slot is a place in the pool, not a token id)."""
    events = [ev.HitCounted((2, 3), 0, True), ev.NodeInserted(3, 2, (9,), (5,), 0, 0.0)]
    assert step_roles(events) == {2: "matched", 3: "new"}
    assert step_roles(events, present=[3]) == {3: "new"}
    hops = [ev.LockChanged(9, 0, -1, 40), ev.LockChanged(4, 0, -1, 10)]
    assert lock_walk_line("t", hops) == ("t unlocks #9 → #4, 2 hops up to the root: lock_ref "
                                         "0, 0; 50 tokens now evictable")
    assert slot_ranges([5, 6, 7, 9]) == "5..7, 9 (4 slots)"
    c = RadixCache()
    c.insert([100, 200, 300], [7, 8, 9])
    line = node_line(c.snapshot().by_id()[1], "R1")
    assert "inserted by R1" in line and "KV slots 7..9 (3 slots)" in line


def test_kv_events_summary_counts_the_recording():
    """examples/traces/kv_events.jsonl: 3 batches; 3 BlockStored store 271 blocks x 16 = 4,336
    tokens; 22 BlockRemoved remove one block each (22)."""
    from pathlib import Path

    from radix.traces import load_trace
    from viz.trace import kv_events_summary

    data = (Path(__file__).resolve().parents[2] / "examples/traces/kv_events.jsonl").read_bytes()
    text = kv_events_summary(load_trace(data))
    assert text.startswith("3 batches (ts 0 .. 2): 3 BlockStored events storing 271 blocks "
                           "(4,336 tokens), 22 BlockRemoved events removing 22 blocks")


def test_made_up_reply_ids_are_explained():
    """#24 item 10: a Mooncake replay's tree held ids like 9,223,372,037,272,109,056 and nothing
    said what they were. That id is 2**63 + (199 << 21): request #199's first made-up reply
    token (radix/traces/trace.py); the note says so, and a plain trace's base (2**40, << 20)
    likewise. A tree of the trace's own ids gets no note. (A compact trace's tree is not a
    RadixCache, which takes int64 ids: the snapshot here has only what the note reads.)"""
    from types import SimpleNamespace as Snap

    from viz.trace import synthetic_ids_note

    def tree(*paths):
        return Snap(nodes=[Snap(token_ids=[])] + [Snap(token_ids=list(p)) for p in paths])

    assert synthetic_ids_note(tree([1, 2, 3])) is None
    note = synthetic_ids_note(tree([1, 2, 3], [9_223_372_037_272_109_056]))
    assert note.startswith("Ids from 9,223,372,036,854,775,808 up are made-up output tokens")
    assert "+ (i << 21) + j" in note
    note = synthetic_ids_note(tree([5, (1 << 40) + (3 << 20)]))
    assert "Ids from 1,099,511,627,776 up" in note and "+ (i << 20) + j" in note
