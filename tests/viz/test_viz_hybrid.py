"""The component tree's picture and words, and vLLM's lookup by group, on small hand-made
snapshots and lookup records: labels per component, the path's pens, a fold that keeps what
the frame is about, each group's cells and the cut, the words' numbers."""

from __future__ import annotations

from types import SimpleNamespace as N

from radix import events as ev
from radix.tree.unified_check import ComponentNodeState
from viz.group_grid import group_grid_chart, group_rows
from viz.hybrid import component_scene, frame_highlight
from viz.hybrid_evict import frame_line
from viz.hybrid_words import cut_reasons, match_line, totals_rows, vllm_line


def node(i, parent, n, start=0, lock=0, swa=None, mamba=None, leaf=False, swa_lock=0):
    return ComponentNodeState(i, parent, tuple(range(start, start + n)), tuple(range(n)), lock,
                              swa, swa_lock, mamba, 0, leaf)


ROOT = node(0, None, 0, lock=1)


def test_each_node_says_its_components_and_the_path_is_drawn_in_two_pens():
    """S (#2, 0..1,600, no state) over R1's rest (#1, 1,600..2,176, state 5) and R2's match
    of 1,600 + 1 that stopped at the root: #2 is `cut` (full attention matched it, no state),
    nothing is `hit`; labels carry each component's value or tombstone and its lock."""
    nodes = [ROOT, node(2, 0, 1600), node(1, 2, 576, 1600, mamba=(5,), leaf=True)]
    matched = ev.HybridPrefixMatched((), 1601, 0, 1600, 1600, None)
    hl = frame_highlight(nodes, [matched], list(range(1601)))
    assert hl == {2: "cut"}
    scene = component_scene(nodes, ("full", "mamba"), hl)
    boxes = {b["id"]: b for b in scene["nodes"]}
    assert boxes["n2"]["label"] == "#2  r=0\nmamba: tombstone  r=0"
    assert boxes["n1"]["label"] == "#1  r=0\nmamba: state 5  r=0"
    assert (boxes["n2"]["stroke"], boxes["n2"]["role"]) == ("#d62728", "cut")
    edges = {e["id"]: e["label"] for e in scene["edges"]}
    assert edges == {"e2": "1,600 tok\n0..1,600", "e1": "576 tok\n1,600..2,176"}
    swa = component_scene([ROOT, node(3, 0, 8, swa=None, swa_lock=1)], ("full", "swa"))
    assert swa["nodes"][1]["label"] == "#3  r=0\nswa: tombstone  r=1"


def test_a_fold_to_fit_keeps_the_highlighted_node():
    """A root with 40 one-token leaves does not fit a 300 x 200 px view at 14 px labels: it
    folds, and the highlighted leaf #40 stays a box of its own."""
    nodes = [ROOT] + [node(i, 0, 1, start=100 * i, mamba=(i,), leaf=True) for i in range(1, 41)]
    scene = component_scene(nodes, ("full", "mamba"), {40: "stored"}, (300.0, 200.0, 14.0))
    ids = [b["id"] for b in scene["nodes"]]
    assert "n40" in ids and any(i.startswith("m") for i in ids) and len(ids) < 20
    assert len(component_scene(nodes, ("full", "mamba"), None, None, 4)["nodes"]) == 6


def test_cut_reasons_name_the_window_and_the_state():
    """SWA window 8: a path whose last node's SWA is a tombstone has no live window behind
    its end; with 4 live tokens, only 4 of 8."""
    info = N(components=("full", "swa", "mamba"), window=8)
    dead = [ROOT, node(2, 0, 16, swa=None, mamba=None)]
    assert cut_reasons(info, dead, list(range(16)), 16) == [
        "no Mamba state at 16 (node #2 is a Mamba tombstone)",
        "the 8-token window behind 16 is an SWA tombstone"]
    part = [ROOT, node(2, 0, 12, swa=None, mamba=(1,)), node(3, 2, 4, 12, swa=(1,) * 4,
                                                            mamba=(2,))]
    assert cut_reasons(info, part, list(range(16)), 16) == [
        "only 4 of the 8 window tokens behind 16 are live (an SWA tombstone before them)"]
    m = ev.HybridPrefixMatched((), 17, 0, 16, None, 16)
    line = match_line("gpt-oss-20b", N(components=("full", "swa"), window=8), "R2", m, part,
                      list(range(16)))
    assert line.endswith("the hit is cut to 0. The match asks R2 to insert up to 16 with its "
                         "window (swa_branching_seqlen).")


def test_each_group_needs_its_own_blocks_and_the_cut_crosses_them():
    """gpt-oss at block 16, window 128: R4 of 2,200 tokens; full attention holds 118 blocks
    (1,888), the window group 100 blocks (1,600): it needs only the last ceil(127 / 16) = 8
    before 1,600, the rest null. Agreed: 1,600, so full attention's blocks 100..117 are cut.
    A Mamba group needs only the block whose end holds the state."""
    look = N(num_tokens=2200, hit_tokens=1600, group_hits=(1600, 1888))
    window, full = group_rows(("sliding_window", "full_attention"), 16, 128, look)
    assert len(full.cells) == 137
    assert window.cells[:92] == ("null",) * 92 and window.cells[92:100] == ("hit",) * 8
    assert window.cells[100:] == ("miss",) * 37
    assert full.cells[99:101] == ("hit", "cut") and full.cells[117:119] == ("cut", "miss")
    mamba, = group_rows(("mamba",), 576, None, N(num_tokens=2200, hit_tokens=1152,
                                                 group_hits=(1152,)))
    assert mamba.cells == ("null", "hit", "miss")
    chart = group_grid_chart([window, full], 16, 1600, "R4", 14)
    assert chart["series"][-1]["markLine"]["data"] == [{"xAxis": 100.0}]
    assert chart["yAxis"]["data"] == ["group 0: window (1,600)", "group 1: full (1,888)"]
    assert chart["title"]["textStyle"]["fontSize"] == 14


def test_words_for_vllm_and_the_totals():
    info = N(preset="gpt-oss-20b", block_size=16, kinds=("sliding_window", "full_attention"))
    look = N(rid="R4", hit_tokens=1600, group_hits=(1600, 1888),
             num_uncached_common_prefix_tokens=288, shared_prefix_boundary=1888)
    assert vllm_line(info, look) == (
        "vLLM, gpt-oss-20b (block 16): full attention 1,888, sliding window 1,600: the "
        "intersection gives 1,600; 288 common tokens are not cached in every group: the "
        "junction is pinned at 1,888 (R4's first chunk ends there, so every group caches that "
        "point).")
    t = {"engine": "sglang", "requests": 3, "rejected": 1, "hit_rate": 0.5, "hit_tokens": 1600,
         "prefilled_tokens": 1600, "attention_hit_tokens": 3200,
         "cut": {"mamba": 1500, "intersection": 100}}
    row = totals_rows({"sglang": t})[0]
    assert (row["engine"], row["requests (rejected)"], row["hit rate"]) == (
        "SGLang 0.5.23", "3 (1)", "50.0%")
    assert row["cut from attention's hit"] == "Mamba 1,500, the intersection 100"


def test_the_eviction_frames_say_their_rule():
    run = N(ask="swa", amount=16, live=True, lru={"swa": (2, 4)},
            freed={"full": 0, "swa": 8, "mamba": 1}, names={2: "chat A"},
            frames=[N(event=None, nodes=[ROOT, node(4, 0, 32, lock=1, swa_lock=1),
                                         node(2, 4, 8, 32, swa=(1,) * 8, mamba=(3,))]),
                    N(event=ev.ComponentTombstoned(2, "swa", 8, "evict"), nodes=[]),
                    N(event=ev.ComponentTombstoned(2, "mamba", 1, "cascade"), nodes=[])])
    run.frames[1].nodes = run.frames[0].nodes
    assert frame_line(run, 0) == (
        "The next admission asks to evict 16 SWA tokens. SWA's LRU from the tail: #2, #4 "
        "(locked: passed over). Chat C is running: its lock holds the system prompt in every "
        "component (r=1), so nothing of it can go.")
    assert frame_line(run, 1).startswith("SWA's LRU tail is node #2 (chat A, 32..40), inside")
    assert frame_line(run, 2).endswith(
        "Freed in all: 0 full tokens, 8 SWA tokens, 1 Mamba state.")
