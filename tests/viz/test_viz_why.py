"""The why panels' pictures (viz/why.py) on pairs whose parting token is known: the tree's mark
on the node where B leaves A, the grid's star on B's first block whose hash differs."""

from __future__ import annotations

import textwrap
from html import unescape

import pytest

from radix.traces import Trace, TraceRequest
from scenarios.why import compare
from viz.blocks import CHAIN_TRACE, STATE_COLORS, STATES, block_grid_figure
from viz.grid_chart import grid_height
from viz.roles import ROLES
from viz.why import (
    MARK_TRACE,
    PARTING_ROLE,
    PARTING_STROKE,
    marked_grid_chart,
    marked_grid_height,
    parting_scene,
)

A = tuple(range(60))
B = (*range(40), *range(900, 920))  # parts from A at token 40


def view(a, b, salt_b=None, block_size=16):
    t = Trace("request", [TraceRequest("a", 0.0, a, 2),
                          TraceRequest("b", 1.0, b, 2, cache_salt=salt_b)])
    return compare(t, "a", "b", block_size=block_size)


def scene_of(v):
    return parting_scene(v.tree, v.highlight, v.names, v.parting_node, v.parting_label)


def test_tree_marks_the_node_where_b_leaves_a():
    """Insert A (node 1, 60 tokens), then B: node 1 splits at token 40, node 2 holds [0, 40)
    and becomes node 1's parent; B's tail [40, 60) is node 3. B leaves A at node 2's end,
    token 40: n2 is marked; e1 (A's tail) keeps A's black pen, e3 (B's) B's green, e2 (both
    paths) the matched blue."""
    s = scene_of(view(A, B))
    nodes = {n["id"]: n for n in s["nodes"]}
    edges = {e["id"]: e for e in s["edges"]}
    marked = [n for n in s["nodes"] if n["role"] == PARTING_ROLE]
    assert [n["id"] for n in marked] == ["n2"]
    assert marked[0]["label"].endswith("shared: 40 tokens\n◆ B leaves A here: token 40")
    assert marked[0]["stroke"] == PARTING_STROKE
    assert edges["e1"]["stroke"] == ROLES["selected"][0] and "A only" in nodes["n1"]["label"]
    assert edges["e3"]["stroke"] == ROLES["new"][0] and "B only" in nodes["n3"]["label"]
    assert edges["e2"]["stroke"] == ROLES["matched"][0]
    assert (edges["e1"]["source"], edges["e3"]["source"]) == ("n2", "n2")  # both leave n2


def test_tree_marks_the_root_for_another_namespace_and_the_end_when_b_is_inside_a():
    """Same tokens, another cache_salt: separate subtrees, B leaves A at the root (token 0).
    B = A's first 40 tokens: B's insert splits A's node at 40 and adds nothing; B ends there."""
    s = scene_of(view(A, A, salt_b="t2"))
    (marked,) = [n for n in s["nodes"] if n["role"] == PARTING_ROLE]
    assert marked["id"] == "n0" and marked["label"].endswith(
        "◆ B leaves A here: token 0 (another namespace)")
    s = scene_of(view(A, A[:40]))
    (marked,) = [n for n in s["nodes"] if n["role"] == PARTING_ROLE]
    assert marked["label"].endswith("◆ B ends here, on A's path: token 40")


def test_tree_mark_on_a_missing_node_is_an_error():
    v = view(A, B)
    with pytest.raises(ValueError, match="parting node 99"):
        parting_scene(v.tree, v.highlight, v.names, 99, v.parting_label)


def grid_of(v):
    g = v.grid
    return marked_grid_chart(g.snapshot, g.b_block_ids, g.mark_block_id, g.mark_label,
                             v.block_sentence, g.labels)


def _series(option: dict, name: str) -> dict:
    (found,) = [s for s in option["series"] if s.get("name") == name]
    return found


def test_grid_is_every_page_grid_cell_by_cell():
    """The why grid is the keyed ECharts grid every page draws (it was a plotly figure, blank
    for a frame after each pick, #24): cell by cell the plotly figure's (block_grid_figure,
    the exports' grid) of the same pool, 16 a row: (column, row), state code and hover lines
    (the figure's <br> a newline, its escaped "B&#x27;s" plain: ECharts escapes); the same
    chain cells and legend, the mark's entry last."""
    v = view(A, B)
    g = v.grid
    option = grid_of(v)
    fig = block_grid_figure(g.snapshot, columns=16, chain_ids=g.b_block_ids, labels=g.labels)
    heat = fig.data[0]
    want = {(c, r): (z, unescape(t.replace("<br>", "\n")))
            for r, (zs, ts) in enumerate(zip(heat.z, heat.text))
            for c, (z, t) in enumerate(zip(zs, ts)) if z is not None}
    got = {(c, r): (z, cell["name"]) for cell in option["series"][0]["data"]
           for c, r, z in [cell["value"]]}
    assert got == want and len(got) > 0
    assert option["visualMap"]["pieces"] == [{"value": i, "color": STATE_COLORS[s]}
                                             for i, s in enumerate(STATES)]
    assert option["legend"]["data"] == [t.name for t in fig.data[1:]] + [MARK_TRACE]
    (chain,) = [t for t in fig.data if t.name == CHAIN_TRACE]
    assert _series(option, CHAIN_TRACE)["data"] == [list(p) for p in zip(chain.x, chain.y)]


def test_grid_stars_b_first_block_whose_hash_differs():
    """Blocks of 16: A takes #1..#4 and frees them (#4, partial, hashless, to the queue's head);
    B hits #1, #2 (tokens 0..31, A's) and takes #4, #5. Token 40 sits in B's block 2 = #4, the
    first whose hash differs: drawn cell 3 of a 16-wide grid, so x = 3, y = 0 (first row: the
    label under the star; left half: it reads rightwards). The title wraps at 110 characters;
    the chart grows one 18 px line for each line past the first."""
    v = view(A, B)
    assert v.grid.b_block_ids == [1, 2, 4, 5] and v.grid.mark_block_id == 4
    option = grid_of(v)
    star = _series(option, MARK_TRACE)
    assert star["data"] == [[3, 0]]
    assert _series(option, CHAIN_TRACE)["data"] == [[0, 0], [1, 0], [3, 0], [4, 0]]
    label = star["label"]
    assert label["formatter"] == "◆ B's block 2 (#4): the first whose hash differs"
    assert (label["position"], label["align"]) == ("bottom", "left")
    title = option["title"]["text"]
    assert "Block 2 (tokens [32, 48)) is the first whose hash differs" in title.replace("\n", " ")
    assert "Cause: no known cause" in title  # token ids only: no text detector fits
    lines = title.count("\n") + 1
    assert lines == len(textwrap.wrap(v.block_sentence, 110)) >= 2
    assert marked_grid_height(option) == grid_height(option) + 18 * (lines - 1)
    assert option["grid"]["top"] == 20 + 18 * lines


def test_grid_without_a_differing_hash_marks_where_the_lookup_stopped():
    """B = A's first 40 tokens, blocks of 16: blocks 0, 1 hash as A's; B's last 8 tokens fill
    no block, so vLLM's lookup stops at block 2 (partial): that block is starred instead."""
    v = view(A, A[:40])
    assert v.first_bad_block is None and v.grid.mark_index == 2
    star = _series(grid_of(v), MARK_TRACE)
    assert star["label"]["formatter"].endswith("not a full block, so no hash")
