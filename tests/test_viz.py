"""viz/: DOT ids and labels, the tree layout, narration, the timeline cursor, the Tour's numbers."""

from __future__ import annotations

import re
import time

import pytest

from radix.tree.eventlog import EventLog
from radix.tree.radix_cache import RadixCache
from viz.component import view_data
from viz.dot import ROLES, token_preview, tree_to_dot
from viz.layout import parse_tree_dot, tree_scene
from viz.timeline import Timeline
from viz.tour import block_counters, run_tour, split_frame, tour_numbers, tree_counters


def _dot_nodes(dot: str) -> set[str]:
    return set(re.findall(r'^\s+"(n\d+)" \[id=', dot, flags=re.M))


def _dot_edges(dot: str) -> dict[str, tuple[str, str]]:
    return {m[2]: (m[0], m[1]) for m in re.findall(r'"(n\d+)" -> "(n\d+)" \[id="(e\d+)"', dot)}


def test_dot_split_keeps_ids():
    """insert [1,2,3] then [1,2,4]: node 1 ([1,2,3]) splits after 2 tokens; the new prefix node
    2 takes edge e2 from the root, node 1 keeps its id and edge id e1, now under node 2, and
    the new leaf 3 ([4]) hangs under node 2. Labels: 2 tok / 1 tok / 1 tok."""
    c = RadixCache()
    c.insert([1, 2, 3])
    before = tree_to_dot(c.snapshot())
    c.insert([1, 2, 4])
    after = tree_to_dot(c.snapshot())
    assert _dot_nodes(before) == {"n0", "n1"}
    assert _dot_nodes(after) == {"n0", "n1", "n2", "n3"}
    assert _dot_edges(before) == {"e1": ("n0", "n1")}
    assert _dot_edges(after) == {"e2": ("n0", "n2"), "e1": ("n2", "n1"), "e3": ("n2", "n3")}
    assert 'label="2 tok\\n[1 2]"' in after and 'label="1 tok\\n[3]"' in after


def test_dot_labels_lock_and_evictable():
    c = RadixCache()
    c.insert([1, 2, 3])
    m = c.match_prefix([1, 2, 3])
    c.inc_lock_ref(m.last_node)
    dot = tree_to_dot(c.snapshot())
    assert 'label="#1  r=1"' in dot and "dashed" not in dot  # locked: not evictable
    c.dec_lock_ref(m.last_node)
    dot = tree_to_dot(c.snapshot(), highlight={1: "evicted"})
    assert 'label="#1  r=0"' in dot and "filled,rounded,dashed" in dot
    assert f'color="{ROLES["evicted"][0]}"' in dot


def test_dot_decode_preview_is_escaped():
    c = RadixCache()
    c.insert([7, 8])
    dot = tree_to_dot(c.snapshot(), decode=lambda ids: 'say "hi"\nnow')
    assert "\\\"hi\\\"" in dot and "say" in dot and "\nnow" not in dot
    with pytest.raises(ValueError, match="unknown highlight role"):
        tree_to_dot(c.snapshot(), highlight={1: "glow"})


def test_token_preview_cuts():
    assert token_preview([5, 6], None) == "[5 6]"
    assert token_preview(list(range(100)), None, max_chars=10) == "[0 1 2 3…]"
    assert token_preview([1], lambda ids: "x" * 40, max_chars=5) == repr("xxxxx…")


def _centres(scene: dict) -> dict[str, tuple[float, float]]:
    return {n[0]: (n[1], n[2]) for n in scene["nodes"]}


def test_layout_root_and_one_child():
    """The worked example of tree_scene's docstring: band 61.7 + 10 = 71.7 px, both centres at
    x = 35.9 (35.85 rounded); y = 10 (root box 20 / 2) and 20 + 2 x 12 + 22 + 10 = 76; the edge
    label sits between: 76 - 10 - 12 - 11 = 43."""
    c = RadixCache()
    c.insert([1, 2, 3])
    scene = tree_scene(tree_to_dot(c.snapshot()))
    assert _centres(scene) == {"n0": (35.9, 10.0), "n1": (35.9, 76.0)}
    assert (scene["width"], scene["height"]) == (71.7, 86.0)
    [edge] = scene["edges"]
    assert edge[:6] == ["e1", "n0", "n1", "3 tok\n[1 2 3]", 35.9, 43.0]
    node1 = scene["nodes"][1]
    assert node1[5:10] == ["#1  r=0", "#e3f4e1", "#555555", 1.0, 1]  # evictable: dashed


def test_layout_split_on_the_right_keeps_the_left_in_place():
    """Root children [1,2,3] (left, child key 1) and [5,6] (right); inserting [5,7] splits the
    right one: its subtree gets a rank and a band more, the left leaf does not move at all."""
    c = RadixCache()
    c.insert([1, 2, 3])
    c.insert([5, 6])
    before = _centres(tree_scene(tree_to_dot(c.snapshot())))
    c.insert([5, 7])
    after = _centres(tree_scene(tree_to_dot(c.snapshot())))
    assert set(after) - set(before) == {"n3", "n4"}
    assert after["n1"] == before["n1"]
    assert after["n2"][1] > before["n2"][1]  # the split node's old half moved down a rank
    assert after["n3"][1] == before["n2"][1]  # the new prefix node took its rank


def test_layout_lr_parse_and_signature():
    """rankdir=LR swaps the axes (depth along x); DOT escapes come back as text; the
    signature follows the DOT, so the browser skips a rerun that sends the same tree."""
    c = RadixCache()
    c.insert([7, 8])
    dot = tree_to_dot(c.snapshot(), decode=lambda ids: 'say "hi"', rankdir="LR")
    scene = tree_scene(dot)
    (x0, y0), (x1, y1) = _centres(scene).values()
    assert scene["rankdir"] == "LR" and x1 > x0 and y1 == y0
    graph, nodes, edges = parse_tree_dot(dot)
    assert graph["rankdir"] == "LR" and [n for n, _ in nodes] == ["n0", "n1"]
    assert edges[0][2]["label"] == "2 tok\n'say \"hi\"'"
    assert view_data(dot)["sig"] == view_data(dot)["sig"] != view_data(dot + " ")["sig"]


def test_layout_cycle_is_laid_out_once():
    """a -> b -> a: b's first edge makes it a's child, so no root is left; a, the first node no
    root reaches, becomes one, b hangs under it and both edges are still drawn."""
    dot = '  "a" [label="a"];\n  "a" -> "b" [id="x"];\n  "b" -> "a" [id="y"];\n'
    scene = tree_scene(dot)
    assert [n[0] for n in scene["nodes"]] == ["a", "b"] and len(scene["edges"]) == 2


def test_tour_split_narration_and_numbers():
    """R2 = S+F+80 leaves R1 = S+F+96 at token 512 + 1,543 = 2,055: 2,151 -> 2,055 + 96.
    The end: stored 512 + 1,543 + 96 + 80 + 2,112 = 4,343; apart 2,151 + 2,135 + 2,624 = 6,910;
    saved 2,567 = 2,567 x 131,072 B = 320.9 MiB; 2,567 / 22,036 tok/s = 116.5 ms."""
    run = run_tour()
    tl = Timeline(run.log)
    step, k = split_frame(run, tl)
    f = tl.frame(step, k)
    assert f.narration.startswith("R2 leaves R1 at token 2,055: node #1 splits into 2,055 + 96")
    assert sorted(f.highlight.values()) == ["split", "split"]
    before = tl.frame(*tl.prev(step, k))
    assert len(f.snapshot.nodes) == len(before.snapshot.nodes) + 1
    end = tl.frame(tl.num_steps)
    n = tour_numbers(run, end.snapshot, tl.num_steps, 0)
    assert (n.stored, n.apart, n.saved) == (4_343, 6_910, 2_567)
    assert round(n.saved_mib, 1) == 320.9 and round(n.saved_prefill_ms, 1) == 116.5


def test_tour_counters_count_a_lookup_at_the_same_frame():
    """Both caches count a request's lookup from its match step's first micro-event. At step 5,
    event 1 (R2's split, before its PrefixMatched): looked up 2,151 + 2,135 = 4,286 in both;
    hits: tree 2,055 (S + F), blocks 128 x 16 = 2,048. At every frame of the walk the two
    looked-up counts agree."""
    run = run_tour()
    tl = Timeline(run.log)
    tree = tree_counters(run, tl.frame(5, 1).snapshot, 5, 1)
    blocks = block_counters(run, 5, 1)
    assert (tree.looked_up, tree.hit, blocks.looked_up, blocks.hit) == (4_286, 2_055, 4_286, 2_048)
    assert tree_counters(run, tl.frame(5, 0).snapshot, 5, 0).looked_up == 2_151
    for step in range(tl.num_steps + 1):
        for k in range(tl.num_micro(step) + 1):
            t = tree_counters(run, tl.frame(step, k).snapshot, step, k)
            assert t.looked_up == block_counters(run, step, k).looked_up, (step, k)


def test_timeline_eviction_frame_shows_then_removes():
    log = EventLog()
    c = RadixCache(sink=log)
    c.insert([1, 2, 3])
    c.insert([4, 5])
    c.evict(1)  # the older leaf [1,2,3] goes first
    tl = Timeline(log)
    step = tl.num_steps - 1
    ks = [k for k in range(1, tl.num_micro(step) + 1) if tl.frame(step, k).highlight]
    shown = tl.frame(step, ks[0])
    assert shown.highlight == {1: "evicted"} and 1 in shown.snapshot.by_id()
    assert "evict pops leaf #1 (3 tokens)" in shown.narration
    assert 1 not in tl.frame(*tl.next(step, ks[0])).snapshot.by_id()


def test_timeline_cursor_walks_every_frame_both_ways():
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


def test_scrub_10000_step_log_under_a_second():
    """10,000 steps (inserts of 200 keys sharing prefixes, matches, evictions): any frame in
    under a second, here the worst case: just before a keyframe."""
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
    for step in (9_999, 5_055, 63, 7_000):
        started = time.perf_counter()
        f = tl.frame(step, tl.num_micro(step))
        assert time.perf_counter() - started < 1.0
        assert f.snapshot.nodes[0].id == 0


def test_kv_events_summary_counts_the_recording():
    """examples/traces/kv_events.jsonl: 3 batches; 3 BlockStored store 271 blocks x 16 = 4,336
    tokens; 22 BlockRemoved remove one block each (22)."""
    from pathlib import Path

    from radix.traces import load_trace
    from viz.trace_debug import kv_events_summary

    data = (Path(__file__).resolve().parent.parent / "examples/traces/kv_events.jsonl").read_bytes()
    text = kv_events_summary(load_trace(data))
    assert text.startswith("3 batches (ts 0 .. 2): 3 BlockStored events storing 271 blocks "
                           "(4,336 tokens), 22 BlockRemoved events removing 22 blocks")
