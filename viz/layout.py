"""The tidy layered layout every tree picture shares: boxes and edges in, centres out.

`place` follows dot's semantics for a tree (rank = depth, children in edge order, each parent
centred over its children, edge labels between the ranks) in O(n): every subtree gets a band as
wide as the wider of its own box and its children's bands, so a split or a new leaf only moves
the subtrees to its right. 1,000 nodes lay out in milliseconds, where `dot` takes ~0.7 s (edge
labels become virtual nodes). Leaves out: spline routing and measured text widths (the browser
draws each edge as one cubic curve and widens a box whose text came out wider than estimated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

# The radix tree's scene (viz/scene.py), the cluster, host-tier and why pictures place their
# own boxes with it. A node with two parents keeps its first tree edge; the rest are drawn but
# not laid out.

NODE_FONT, EDGE_FONT = 11.0, 9.0  # px in scene units
CHAR_EM = 0.62  # mean DejaVu Sans advance, in em: text width ~ chars x font x 0.62
NODE_PAD, NODE_H = 14.0, 20.0  # box: text width + padding, fixed height
GAP = 10.0  # between neighbouring bands
RANK_GAP = 12.0  # between a rank's boxes and the next rank's edge labels


class Box(NamedTuple):
    """A node to draw."""

    id: str  # stable across scenes: "n<node id>", or "m<parent id>" for a fold
    label: str  # lines split on newlines
    fill: str
    stroke: str
    stroke_width: float
    dashed: bool
    tooltip: str
    role: str  # the highlight role ("" when none), for tests and the browser


class Line(NamedTuple):
    """An edge to draw, from `source` to `target` (box ids)."""

    id: str  # "e<child id>"
    source: str
    target: str
    label: str
    stroke: str
    stroke_width: float


def text_width(text: str, font: float) -> float:
    """Estimated px width of the widest line: `text_width("#1  r=0", 11)` = 7 x 11 x 0.62."""
    return max((len(line) for line in text.split("\n")), default=0) * font * CHAR_EM


def _bands(order: list[str], children: Mapping[str, list[str]], own: Mapping[str, float]):
    """Band width of every subtree: max(own box + GAP, sum of the children's bands)."""
    band: dict[str, float] = {}
    for name in reversed(order):  # pre-order reversed: children before parents
        kids = sum(band[c] for c in children[name])
        band[name] = max(own[name] + GAP, kids)
    return band


def _place(roots: list[str], children, band) -> dict[str, float]:
    """Centre of every node along the breadth axis: roots side by side, children packed left to
    right and centred in their parent's band, a parent centred over its first and last child."""
    start: dict[str, float] = {}
    left = 0.0
    for r in roots:
        start[r], left = left, left + band[r]
    centre: dict[str, float] = {}
    stack = list(reversed(roots))
    order: list[str] = []
    while stack:
        name = stack.pop()
        order.append(name)
        kids = children[name]
        x = start[name] + (band[name] - sum(band[c] for c in kids)) / 2
        for c in kids:
            start[c], x = x, x + band[c]
        stack.extend(reversed(kids))
    for name in reversed(order):
        kids = children[name]
        if kids:
            centre[name] = (centre[kids[0]] + centre[kids[-1]]) / 2
        else:
            centre[name] = start[name] + band[name] / 2
    return centre


def _tree(names: list[str], edges: list[tuple]) -> tuple[list[str], dict, dict, list[str]]:
    """(pre-order, children, depth, roots) over the first edge into each node; a node that no
    root reaches (a cycle) becomes a root of its own."""
    children: dict[str, list[str]] = {n: [] for n in names}
    has_parent: set[str] = set()
    for tail, head, _ in edges:
        if head not in has_parent and head != tail:
            has_parent.add(head)
            children[tail].append(head)
    roots = [n for n in names if n not in has_parent]
    order: list[str] = []
    depth: dict[str, int] = {}
    kids: dict[str, list[str]] = {}
    for candidate in [*roots, *names]:
        if candidate in depth:
            continue
        if candidate not in roots:
            roots.append(candidate)
        depth[candidate], stack = 0, [candidate]
        while stack:
            name = stack.pop()
            order.append(name)
            kids[name] = [c for c in children[name] if c not in depth]
            for c in kids[name]:
                depth[c] = depth[name] + 1
            stack.extend(reversed(kids[name]))
    return order, kids, depth, roots


def _ranks(depth: Mapping[str, int], box: Mapping[str, float], label: Mapping[str, float]):
    """Start of every rank along the depth axis, and each rank's box extent: a rank leaves room
    above it for the widest edge label coming into it (dot puts labels between the ranks)."""
    num = max(depth.values(), default=-1) + 1
    extent, room = [0.0] * num, [0.0] * num
    for name, d in depth.items():
        extent[d] = max(extent[d], box[name])
        room[d] = max(room[d], label.get(name, 0.0))
    start, at = [], 0.0
    for d in range(num):
        at += room[d] + (2 * RANK_GAP if d else 0.0)
        start.append(at)
        at += extent[d]
    return start, extent, at


def place(boxes: Sequence[Box], lines: Sequence[Line], rankdir: str = "TB") -> dict[str, Any]:
    """The scene the browser draws: `{"rankdir", "width", "height", "nodes": [{id, x, y, w, h,
    label, fill, stroke, stroke_width, dashed, tooltip, role}], "edges": [{id, source, target,
    label, label_x, label_y, label_w, label_h, stroke, stroke_width}]}`, x/y the centres in px
    (label_w/h: the label's estimated box, which the browser keeps its edge's line out of).

    A root with one 3-token child (TB): the child's box "#1  r=0" is 7 x 11 x 0.62 + 14 =
    61.7 px wide, wider than its edge label "3 tok" newline "[1 2 3]" (7 x 9 x 0.62 + 4 = 43.1),
    so its band is 61.7 + 10 = 71.7 px, wider than the root's box ("root": 41.3); both centres
    sit at x = 71.7 / 2 = 35.85. Ranks: the root's box (20 px), then 2 x 12 + 22 px for the
    two-line label, so the child's centre is at y = 66 + 10 = 76.
    """
    if rankdir not in ("TB", "LR"):
        raise ValueError(f"rankdir must be 'TB' or 'LR', got {rankdir!r}")
    lr = rankdir == "LR"
    by_id = {b.id: b for b in boxes}
    names = list(by_id)
    edges = [(ln.source, ln.target, ln) for ln in lines if ln.source in by_id
             and ln.target in by_id]
    order, kids, depth, roots = _tree(names, edges)
    size = {n: (text_width(b.label, NODE_FONT) + NODE_PAD, NODE_H + 13.0 * b.label.count("\n"))
            for n, b in by_id.items()}
    elabel = {head: ln.label for tail, head, ln in edges if depth.get(head, 0) > 0}
    lsize = {h: (text_width(t, EDGE_FONT) + 4, 11.0 * (t.count("\n") + 1) if t else 0.0)
             for h, t in elabel.items()}
    across, along = (1, 0) if lr else (0, 1)  # breadth and depth axes, as index into sizes
    own = {n: max(size[n][across], lsize.get(n, (0.0, 0.0))[across]) for n in names}
    bands = _bands(order, kids, own)
    centre = _place(roots, kids, bands)
    start, extent, total = _ranks(depth, {n: size[n][along] for n in names},
                                  {h: s[along] for h, s in lsize.items()})
    pos = {}
    for n in names:
        d = start[depth[n]] + extent[depth[n]] / 2
        pos[n] = (d, centre[n]) if lr else (centre[n], d)
    out_nodes = [{"id": n, "x": round(pos[n][0], 1), "y": round(pos[n][1], 1),
                  "w": round(size[n][0], 1), "h": round(size[n][1], 1), "label": b.label,
                  "fill": b.fill, "stroke": b.stroke, "stroke_width": b.stroke_width,
                  "dashed": b.dashed, "tooltip": b.tooltip, "role": b.role}
                 for n, b in by_id.items()]
    out_edges = []
    for tail, head, ln in edges:
        lw, lh = lsize.get(head, (0.0, 0.0))
        x, y = pos[head]
        lx, ly = ((x - size[head][0] / 2 - RANK_GAP - lw / 2, y) if lr
                  else (x, y - size[head][1] / 2 - RANK_GAP - lh / 2))
        out_edges.append({"id": ln.id, "source": tail, "target": head, "label": ln.label,
                          "label_x": round(lx, 1), "label_y": round(ly, 1),
                          "label_w": round(lw, 1), "label_h": round(lh, 1),
                          "stroke": ln.stroke, "stroke_width": ln.stroke_width})
    breadth = sum(bands[r] for r in roots)
    width, height = (total, breadth) if lr else (breadth, total)
    return {"rankdir": rankdir, "width": round(width, 1), "height": round(height, 1),
            "nodes": out_nodes, "edges": out_edges}

