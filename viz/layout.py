"""The tree view's layout: viz/dot.py's DOT, parsed and laid out in Python, as a small scene.

Follows dot's semantics for a tree (rank = depth, children in DOT edge order, each parent centred
over its children, edge labels between the ranks) with a tidy layered layout that is O(n): every
subtree gets a band as wide as the wider of its own box and its children's bands, so a split or a
new leaf only moves the subtrees to its right. 1,000 nodes lay out in milliseconds, where `dot`
takes ~0.7 s (edge labels become virtual nodes) and d3-graphviz's WASM more. Leaves out: general
graphs (a node with two parents keeps its first tree edge; the rest are drawn but not laid out),
spline routing (the browser draws each edge as one cubic curve) and measured text widths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NODE_FONT, EDGE_FONT = 11.0, 9.0  # px, as viz/dot.py's fontsize
CHAR_EM = 0.62  # mean DejaVu Sans advance, in em: text width ~ chars x font x 0.62
NODE_PAD, NODE_H = 14.0, 20.0  # box: text width + padding, fixed height
GAP = 10.0  # between neighbouring bands
RANK_GAP = 12.0  # between a rank's boxes and the next rank's edge labels

_STMT = re.compile(r'^\s*"([^"]+)"\s*(?:->\s*"([^"]+)"\s*)?\[(.*)\];\s*$')
_GRAPH = re.compile(r"^\s*graph\s*\[(.*)\];\s*$")
_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s\]]+)')
_UNESCAPE = re.compile(r"\\(.)")


def _unquote(value: str) -> str:
    """DOT's quoted string back to text: `"a\\nb \\"c\\""` -> 'a', newline, 'b "c"'."""
    if not (value.startswith('"') and value.endswith('"')):
        return value
    return _UNESCAPE.sub(lambda m: "\n" if m[1] in "nlr" else m[1], value[1:-1])


def _attrs(text: str) -> dict[str, str]:
    return {k: _unquote(v) for k, v in _ATTR.findall(text)}


def parse_tree_dot(dot: str) -> tuple[dict[str, str], list[tuple[str, dict]], list[tuple]]:
    """(graph attrs, [(node name, attrs)] in DOT order, [(tail, head, attrs)] in DOT order).

    Reads the statement-per-line DOT that `viz.dot.tree_to_dot` writes:
    `'  "n0" -> "n1" [id="e1", label="3 tok\\n[1 2 3]"];'` -> ('n0', 'n1', {'id': 'e1',
    'label': '3 tok' newline '[1 2 3]'}). A node named only by an edge is added with no attrs.
    """
    graph: dict[str, str] = {}
    nodes: dict[str, dict] = {}
    edges: list[tuple[str, str, dict]] = []
    for line in dot.splitlines():
        m = _STMT.match(line)
        if m is None:
            g = _GRAPH.match(line)
            if g is not None:
                graph.update(_attrs(g[1]))
            continue
        tail, head, attrs = m[1], m[2], _attrs(m[3])
        if head is None:
            nodes.setdefault(tail, {}).update(attrs)
        else:
            nodes.setdefault(tail, {})
            nodes.setdefault(head, {})
            edges.append((tail, head, attrs))
    return graph, list(nodes.items()), edges


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


def tree_scene(dot: str) -> dict[str, Any]:
    """The scene the browser draws: node boxes and edge labels placed, styles read from the DOT.

    `{"rankdir", "width", "height", "nodes": [[id, x, y, w, h, label, fill, color, penwidth,
    dashed, tooltip]], "edges": [[id, tail id, head id, label, label x, label y, color,
    penwidth]]}`, x/y the centres in px. A root with one 3-token child (TB): the child's box
    "#1  r=0" is 7 x 11 x 0.62 + 14 = 61.7 px wide, wider than its edge label "3 tok\\n[1 2 3]"
    (7 x 9 x 0.62 + 4 = 43.1), so its band is 61.7 + 10 = 71.7 px, wider than the root's box
    ("root": 41.3); both centres sit at x = 71.7 / 2 = 35.85. Ranks: the root's box (20 px),
    then 2 x 12 + 22 px for the two-line label, so the child's centre is at y = 66 + 10 = 76.
    """
    graph, nodes, edges = parse_tree_dot(dot)
    lr = graph.get("rankdir", "TB") == "LR"
    names = [n for n, _ in nodes]
    attrs = dict(nodes)
    order, kids, depth, roots = _tree(names, edges)
    size = {n: (text_width(a.get("label", n), NODE_FONT) + NODE_PAD,
                NODE_H + 13.0 * a.get("label", n).count("\n")) for n, a in attrs.items()}
    elabel = {head: a.get("label", "") for tail, head, a in edges if depth.get(head, 0) > 0}
    lsize = {h: (text_width(t, EDGE_FONT) + 4, 11.0 * (t.count("\n") + 1) if t else 0.0)
             for h, t in elabel.items()}
    across, along = (1, 0) if lr else (0, 1)  # breadth and depth axes, as index into sizes
    own = {n: max(size[n][across], lsize.get(n, (0.0, 0.0))[across]) for n in names}
    centre = _place(roots, kids, _bands(order, kids, own))
    start, extent, total = _ranks(depth, {n: size[n][along] for n in names},
                                  {h: s[along] for h, s in lsize.items()})
    pos = {}
    for n in names:
        d = start[depth[n]] + extent[depth[n]] / 2
        pos[n] = (d, centre[n]) if lr else (centre[n], d)
    ident = {n: attrs[n].get("id", n) for n in names}
    out_nodes = [_node_row(ident[n], pos[n], size[n], attrs[n], n) for n in names]
    out_edges = []
    for tail, head, a in edges:
        lw, lh = lsize.get(head, (0.0, 0.0))
        x, y = pos[head]
        lx, ly = ((x - size[head][0] / 2 - RANK_GAP - lw / 2, y) if lr
                  else (x, y - size[head][1] / 2 - RANK_GAP - lh / 2))
        out_edges.append([a.get("id", f"{ident[tail]}-{ident[head]}"), ident[tail], ident[head],
                          a.get("label", ""), round(lx, 1), round(ly, 1),
                          a.get("color", "#777777"), float(a.get("penwidth", 1))])
    breadth = sum(_bands(order, kids, own)[r] for r in roots)
    width, height = (total, breadth) if lr else (breadth, total)
    return {"rankdir": "LR" if lr else "TB", "width": round(width, 1), "height": round(height, 1),
            "nodes": out_nodes, "edges": out_edges}


def _node_row(ident: str, pos, size, a: Mapping[str, str], name: str) -> list:
    style = a.get("style", "")
    fill = a.get("fillcolor", "#ffffff") if "filled" in style else "none"
    return [ident, round(pos[0], 1), round(pos[1], 1), round(size[0], 1), round(size[1], 1),
            a.get("label", name), fill, a.get("color", "#555555"), float(a.get("penwidth", 1)),
            int("dashed" in style), a.get("tooltip", "")]
