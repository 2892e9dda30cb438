"""A radix-tree snapshot as a picture: the scene (node boxes and edges with stable ids, laid
out, folded when big) and the words of each step (what an event did, in SGLang's and vLLM's
terms), with the one table of highlight roles and colours every page reads. Follows SGLang's
RadixCache picture (the tokens live on the edge into a node; r=lock_ref; evictable leaves dashed
and green, locked nodes blue) and its words (split, leaf, lock_ref, evictable, input_len - 1).
viz/dot.py writes the same items as DOT for the download. Leaves out: page boundaries inside an
edge; spline routing and measured text widths (the browser does both); the CLI demo's words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from radix import events as ev
from radix.tree.replay import TreeModel
from radix.tree.snapshot import TreeSnapshot
from viz.flavor import split_time_note

# highlight role -> (pen colour, pen width)
ROLES: dict[str, tuple[str, float]] = {
    "matched": ("#1f77b4", 2.5),  # on the path a match walked
    "split": ("#ff7f0e", 3.0),  # a node that split, and its new prefix node
    "new": ("#2ca02c", 3.0),  # a leaf that was just inserted
    "lock": ("#9467bd", 3.5),  # a hop of a lock walk (inc/dec_lock_ref)
    "evicted": ("#d62728", 3.0),  # a leaf popped by evict
    "selected": ("#000000", 2.5),  # the node the user clicked
}
FILL_PROTECTED = "#dbe8f6"  # lock_ref > 0: in use by a running request
FILL_EVICTABLE = "#e3f4e1"  # an evictable leaf
FILL_CACHED = "#ffffff"  # cached, not a leaf (or locked below)
RANK = {"new": 0, "split": 1, "evicted": 2, "lock": 3, "matched": 4, "selected": 5}


# ---------------------------------------------------------------- the scene
# Node `n<id>` and edge `e<child id>` keep their ids across snapshots, so the browser animates a
# split or an eviction in place. Big trees fold (`fold_tree`): at most `max_children` children
# per node are drawn, the rest become one summary node `m<parent id>` counted from the full
# snapshot; `fit_tree_scene` folds just enough for a view size and label size (presenter mode).
# `tree_scene` lays the items out (`place`) as named fields for the browser.
#
# `place` follows dot's semantics for a tree (rank = depth, children in edge order, each parent
# centred over its children, edge labels between the ranks) with a tidy layered layout that is
# O(n): every subtree gets a band as wide as the wider of its own box and its children's bands,
# so a split or a new leaf only moves the subtrees to its right. 1,000 nodes lay out in
# milliseconds, where `dot` takes ~0.7 s (edge labels become virtual nodes). The cluster,
# host-tier and why pictures place their own boxes with it. A node with two parents keeps its
# first tree edge; the rest are drawn but not laid out. The browser draws each edge as one cubic
# curve, and widens a box whose text came out wider than this estimate.

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


Decode = Callable[[list[int]], str]


def token_preview(token_ids: Sequence[int], decode: Decode | None, max_chars: int = 22) -> str:
    """A short, one-line preview of the first tokens of an edge.

    >>> token_preview([5, 6, 7, 8], None, max_chars=8)
    '[5 6 7…]'
    """
    if not token_ids:
        return ""
    head = list(token_ids[: max_chars + 2])
    if decode is None:
        text = " ".join(str(t) for t in head)
        cut = text[: max_chars - 2].rsplit(" ", 1)[0] if len(text) > max_chars - 2 else text
        more = "…" if cut != text or len(token_ids) > len(head) else ""
        return f"[{cut}{more}]"
    text = " ".join(decode(head).split())  # newlines and runs of spaces read as one space
    more = len(token_ids) > len(head) or len(text) > max_chars
    return repr(text[:max_chars] + ("…" if more else ""))


class Fold(NamedTuple):
    """The children of `parent` that are not drawn, counted over their whole subtrees."""
    parent: int  # node id; the summary node is "m<parent>", its edge "em<parent>"
    num_children: int  # children folded away
    num_nodes: int  # nodes in their subtrees (>= num_children)
    tokens: int  # tokens on those nodes
    locked: int  # folded children with lock_ref > 0 (held by running requests)
    evictable_leaves: int  # evictable leaves in their subtrees


class FoldPlan(NamedTuple):
    drawn: frozenset[int]  # node ids drawn one by one
    folds: tuple[Fold, ...]  # one summary per parent with folded children, in pre-order


def _subtree_totals(nodes: Sequence[Any]) -> tuple[dict, dict[int, tuple[int, int, int]]]:
    """(children of each id in snapshot order, id -> (nodes, tokens, evictable leaves) of its
    subtree)."""
    kids: dict[int, list[int]] = {n.id: [] for n in nodes}
    for n in nodes:
        if n.parent in kids:
            kids[n.parent].append(n.id)
    total: dict[int, tuple[int, int, int]] = {}
    for n in reversed(nodes):  # pre-order reversed: children before parents
        sub = [total[c] for c in kids[n.id]]
        total[n.id] = (1 + sum(t[0] for t in sub), len(n.token_ids) + sum(t[1] for t in sub),
                       int(n.evictable_leaf) + sum(t[2] for t in sub))
    return kids, total


def fold_tree(snapshot: TreeSnapshot, max_children: int | None = None, max_depth: int | None = None,
              keep: Iterable[int] = (), prefer: Sequence[int] = ()) -> FoldPlan:
    """Which nodes to draw: at most `max_children` children per node, none below `max_depth`
    (the root is depth 0), except the nodes in `keep` and their ancestors, always drawn.
    A node's children are ranked: kept ones, then those in `prefer` (in its order), then
    locked (lock_ref > 0), then the largest subtrees by tokens, then child order; the rest
    fold into one `Fold`. A single leftover
    child is drawn instead of folded (its summary would take the same room), except at the
    depth cap.

    A root with 100 one-node children of 1..100 tokens, max_children=12: children with
    100..89 tokens are drawn; the Fold counts 88 children, 1 + ... + 88 = 3,916 tokens.
    """
    if max_children is not None and max_children < 1:
        raise ValueError(f"max_children must be >= 1, got {max_children}")
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")
    nodes = snapshot.nodes
    by_id = {n.id: n for n in nodes}
    kids, total = _subtree_totals(nodes)
    must: set[int] = set()
    for i in keep:
        while i in by_id and i not in must:
            must.add(i)
            i = by_id[i].parent
    rank = {n.id: i for i, n in enumerate(nodes)}
    first = {nid: i for i, nid in reversed(list(enumerate(prefer)))}

    def split(children: list[int], limit: int, capped: bool) -> tuple[list[int], Fold | None]:
        if len(children) <= limit:
            return children, None
        order = sorted(children, key=lambda c: (c not in must, first.get(c, len(first)),
                                               by_id[c].lock_ref == 0, -total[c][1], rank[c]))
        shown = {c for c in order if c in must} | set(order[:limit])
        hidden = [c for c in children if c not in shown]
        if not hidden or (len(hidden) == 1 and not capped):
            return children, None
        fold = Fold(by_id[children[0]].parent, len(hidden), sum(total[c][0] for c in hidden),
                    sum(total[c][1] for c in hidden),
                    sum(1 for c in hidden if by_id[c].lock_ref > 0),
                    sum(total[c][2] for c in hidden))
        return [c for c in children if c in shown], fold

    drawn, folds, stack = set(), [], [(nodes[0].id, 0)] if nodes else []
    while stack:
        nid, depth = stack.pop()
        drawn.add(nid)
        capped = max_depth is not None and depth >= max_depth
        limit = 0 if capped else len(kids[nid]) if max_children is None else max_children
        shown, fold = split(kids[nid], limit, capped)
        folds += [fold] if fold else []
        stack.extend((c, depth + 1) for c in reversed(shown))
    folds.sort(key=lambda f: rank[f.parent])
    return FoldPlan(frozenset(drawn), tuple(folds))


def _node_box(node: Any, role: str | None, name: str | None) -> Box:
    label = "root" if node.parent is None else f"#{node.id}  r={node.lock_ref}"
    if name:
        label += f"\n{name}"
    dashed = False
    if node.lock_ref > 0:
        fill = FILL_PROTECTED
    elif node.evictable_leaf:
        fill, dashed = FILL_EVICTABLE, True
    else:
        fill = FILL_CACHED
    stroke, width = ROLES[role] if role else ("#555555", 1.0)
    tooltip = f"node {node.id}: {len(node.token_ids):,} tokens, lock_ref {node.lock_ref}"
    return Box(f"n{node.id}", label, fill, stroke, width, dashed, tooltip, role or "")


def _edge_line(node: Any, role: str | None, decode: Decode | None,
               ids: Callable[[Any], str] | None = None) -> Line:
    shown = token_preview(node.token_ids, decode) if ids is None else ids(node.token_ids)
    label = f"{len(node.token_ids):,} tok\n{shown}"
    stroke, width = ROLES[role] if role else ("#777777", 1.2)
    return Line(f"e{node.id}", f"n{node.parent}", f"n{node.id}", label, stroke, width)


def _fold_items(fold: Fold) -> tuple[Box, Line]:
    """The summary node and its edge. 88 folded leaves of 3,916 tokens, none locked:
    label "+88 more" newline "88 evictable leaves" (zero counts left out; each count on its own
    line, so the box stays narrow), edge "3,916 tok"."""
    more = f"+{fold.num_children:,} more"
    if fold.num_nodes > fold.num_children:
        more += f" ({fold.num_nodes:,} nodes)"
    counts = [f"{n:,} {what}" for n, what in ((fold.locked, "locked"),
                                              (fold.evictable_leaves, "evictable leaves")) if n]
    fill = (FILL_PROTECTED if fold.locked else
            FILL_EVICTABLE if fold.evictable_leaves else FILL_CACHED)
    tooltip = (f"{fold.num_children:,} children of node {fold.parent} not drawn: "
               f"{fold.num_nodes:,} nodes, {fold.tokens:,} tokens")
    box = Box(f"m{fold.parent}", more + "\n" + ("\n".join(counts) or "cached"), fill,
              "#555555", 1.0, not fold.locked, tooltip, "")
    return box, Line(f"em{fold.parent}", f"n{fold.parent}", f"m{fold.parent}",
                     f"{fold.tokens:,} tok", "#777777", 1.2)


def tree_items(snapshot: TreeSnapshot, *, decode: Decode | None = None,
               highlight: Mapping[int, str] | None = None, max_children: int | None = None,
               max_depth: int | None = None, keep: Iterable[int] = (),
               prefer: Sequence[int] = (), names: Mapping[int, str] | None = None,
               ids: Callable[[Any], str] | None = None,
               chains: bool = False, chain_marked: bool = False) -> tuple[list[Box], list[Line]]:
    """The boxes and edges to draw, in pre-order; `highlight` maps node id -> a role of ROLES,
    `names` adds a second label line to some nodes ("system prompt S"), `prefer` ranks some
    children ahead when a node folds (fold_tree), `ids` shows an edge's
    tokens in place of the token preview (a Mooncake trace's hash ids). `chains` (with a fold):
    each run of two or more nodes drawn only as ancestors of highlighted or kept ones becomes
    one box (`chain_runs`), and fold summaries take one line (their counts go to the tooltip).
    `chain_marked` (with `chains`): highlighted nodes chain too, a run of one role drawn as one
    box of that role, so a step that locks a whole deep path still folds; the deepest
    highlighted node of each path, and `keep`, stay boxes of their own (`marked_tips`).

    A root with one 3-token child: boxes "root" and "#1  r=0" (dashed: an evictable leaf),
    one edge e1 from n0 to n1 labelled "3 tok" newline "[1 2 3]".
    """
    highlight = highlight or {}
    for role in highlight.values():
        if role not in ROLES:
            raise ValueError(f"unknown highlight role {role!r}; known: {sorted(ROLES)}")
    plan = None
    if max_children is not None or max_depth is not None:
        plan = fold_tree(snapshot, max_children, max_depth, [*highlight, *keep], prefer)
    names = names or {}
    kept = [*(marked_tips(snapshot, highlight) if chain_marked else highlight), *keep]
    runs = chain_runs(snapshot, plan, kept, highlight) if chains and plan else ()
    gone, into, heads = _chained(snapshot, plan, runs) if runs else (set(), {}, {})
    boxes, lines = [], []
    for node in snapshot.nodes:
        if node.id in heads:
            box, line = _chain_items(heads[node.id])
            boxes.append(box)  # a run of one role may hang below a run of another
            lines.append(line._replace(source=into.get(heads[node.id].parent, line.source)))
            continue
        if plan is not None and node.id not in plan.drawn or node.id in gone:
            continue
        role = highlight.get(node.id)
        boxes.append(_node_box(node, role, names.get(node.id)))
        if node.parent is not None:
            line = _edge_line(node, role, decode, ids)
            lines.append(line._replace(source=into.get(node.parent, line.source)))
    for fold in plan.folds if plan is not None else ():
        if fold.parent in gone and fold.parent not in into:  # a run's last node keeps its own
            continue
        box, line = _fold_items(fold)
        if chains:
            box = box._replace(label=box.label.split("\n")[0],
                               tooltip=f"{box.tooltip}; {box.label.split(chr(10), 1)[1]}")
        boxes.append(box)
        lines.append(line._replace(source=into.get(fold.parent, line.source)))
    return boxes, lines


class Chain(NamedTuple):
    """Nodes on a path drawn as one box `c<first id>` (presenter mode: a lock walk's path)."""
    ids: tuple[int, ...]  # top first; each the parent of the next
    parent: int  # the first node's parent (drawn)
    tokens: int  # tokens on the run's edges
    lock_refs: tuple[int, ...]  # each node's lock_ref, in `ids` order
    hidden: int  # drawn or folded nodes beside the run that the chain box leaves out
    role: str = ""  # the highlight role every node of the run has ("" when none)


def marked_tips(snapshot: TreeSnapshot, highlight: Mapping[int, str]) -> list[int]:
    """The highlighted nodes with no highlighted node below them: a step that locked root >
    #2 > #1 > #4 > #5 > #6 (all five highlighted) has one tip, #6."""
    by_id = {n.id: n for n in snapshot.nodes}
    above: set[int] = set()
    for i in highlight:
        i = by_id[i].parent if i in by_id else None
        while i is not None and i not in above:
            above.add(i)
            i = by_id[i].parent
    return [i for i in highlight if i in by_id and i not in above]


def chain_runs(snapshot: TreeSnapshot, plan: FoldPlan, kept: Iterable[int],
               roles: Mapping[int, str] | None = None) -> tuple[Chain, ...]:
    """The runs of two or more drawn nodes that are drawn only as ancestors of `kept` ones
    (not the root, not kept), each the only child of the one before it on the way to a kept
    node; the run ends where the path branches or reaches a kept node, and where the role in
    `roles` (node id -> highlight role) changes. A lock walk's first hop at #6 on root > #2 >
    #1 > #4 > #5 > #6: one run (2, 1, 4, 5), drawn as one box; with #2 and #1 highlighted as
    "lock": two runs, (2, 1) of role "lock" and (4, 5)."""
    roles = roles or {}
    by_id = {n.id: n for n in snapshot.nodes}
    kept = {i for i in kept if i in by_id}
    onpath: set[int] = set()
    for i in kept:
        i = by_id[i].parent
        while i is not None and i not in onpath:
            onpath.add(i)
            i = by_id[i].parent
    onpath = {i for i in onpath if i in plan.drawn and by_id[i].parent is not None} - kept
    below: dict[int, list[int]] = {}
    for n in snapshot.nodes:
        if n.id in onpath or n.id in kept:
            below.setdefault(n.parent, []).append(n.id)
    runs, seen = [], set()
    for n in snapshot.nodes:  # pre-order: a run's top comes first
        if n.id not in onpath or n.id in seen:
            continue
        ids = [n.id]
        while len(below.get(ids[-1], ())) == 1 and below[ids[-1]][0] in onpath:
            ids.append(below[ids[-1]][0])
        seen.update(ids)
        cut = [0, *(k for k in range(1, len(ids)) if roles.get(ids[k]) != roles.get(ids[k - 1]))]
        runs += [part for a, b in zip(cut, [*cut[1:], len(ids)]) if len(part := ids[a:b]) >= 2]
    return tuple(_chain(by_id, plan, ids)._replace(role=roles.get(ids[0], "")) for ids in runs)


def _chain(by_id: Mapping[int, Any], plan: FoldPlan, ids: list[int]) -> Chain:
    inside = set(ids)
    hidden = sum(1 for n in by_id.values() if n.id in plan.drawn and n.parent in inside
                 and n.id not in inside and n.parent != ids[-1])
    hidden += sum(f.num_nodes for f in plan.folds if f.parent in inside and f.parent != ids[-1])
    return Chain(tuple(ids), by_id[ids[0]].parent, sum(len(by_id[i].token_ids) for i in ids),
                 tuple(by_id[i].lock_ref for i in ids), hidden)


def _chained(snapshot: TreeSnapshot, plan: FoldPlan,
             runs: Sequence[Chain]) -> tuple[set[int], dict[int, str], dict[int, Chain]]:
    """(node ids not drawn one by one, chain box id for the last node of each run (its
    children hang below the box), chain by its first node id). Children of a run's other nodes
    that are not on the run, and their subtrees, are left out."""
    gone: set[int] = set()
    into = {c.ids[-1]: f"c{c.ids[0]}" for c in runs}
    inner = {i for c in runs for i in c.ids[:-1]}
    gone.update(i for c in runs for i in c.ids)
    for n in snapshot.nodes:  # pre-order: parents first
        if n.parent in inner and n.id not in gone or n.parent in gone - set(into) - inner:
            gone.add(n.id)
    return gone, into, {c.ids[0]: c for c in runs}


def _chain_items(chain: Chain) -> tuple[Box, Line]:
    """The chain's box and its edge. Run 2, 1, 4, 5 of 2,100 tokens, none locked: label
    "#2 … #5" newline "4 nodes, r=0", edge "2,100 tok"."""
    lo, hi = min(chain.lock_refs), max(chain.lock_refs)
    stroke, width = ROLES[chain.role] if chain.role else ("#555555", 1.0)
    refs = f"r={lo}" if lo == hi else f"r={lo}..{hi}"
    box_id = f"c{chain.ids[0]}"
    label = f"#{chain.ids[0]} … #{chain.ids[-1]}\n{len(chain.ids)} nodes, {refs}"
    tooltip = (f"nodes {', '.join(f'#{i}' for i in chain.ids)} on the path, drawn as one box: "
               f"{chain.tokens:,} tokens")
    if chain.role:
        tooltip += f"; each of them: {chain.role}"
    if chain.hidden:
        tooltip += f"; not drawn beside them: {chain.hidden:,} node(s)"
    fill = FILL_PROTECTED if hi > 0 else FILL_CACHED
    box = Box(box_id, label, fill, stroke, width, False, tooltip, chain.role)
    edge = ROLES[chain.role] if chain.role else ("#777777", 1.2)
    return box, Line(f"e{box_id}", f"n{chain.parent}", box_id, f"{chain.tokens:,} tok", *edge)


def tree_scene(snapshot: TreeSnapshot, *, rankdir: str = "TB", **items: Any) -> dict[str, Any]:
    """The laid-out scene of `tree_items(snapshot, **items)` (`place`)."""
    boxes, lines = tree_items(snapshot, **items)
    return place(boxes, lines, rankdir)


VIEW_PAD = 8.0  # scene units the tree view keeps around a scene (viz/component's PAD)
FIT_CHILDREN = (8, 4, 2, 1)  # max_children tried in turn, then depth caps from the deepest


def fits(scene: Mapping[str, Any], width_px: float, height_px: float, min_font_px: float) -> bool:
    """Whether the tree view can show all of `scene` with its smallest label (an edge's, 9
    scene units) at `min_font_px`: the padded scene times min_font_px / 9 inside the host.
    A 200 x 100 scene at 14 px: 216 x 116 units x 1.556 = 336 x 180 px."""
    k = min_font_px / EDGE_FONT
    return ((scene["width"] + 2 * VIEW_PAD) * k <= width_px
            and (scene["height"] + 2 * VIEW_PAD) * k <= height_px)


def fit_tree_scene(snapshot: TreeSnapshot, width_px: float, height_px: float,
                   min_font_px: float, **items: Any) -> dict[str, Any]:
    """`tree_scene` folded just enough to fit a `width_px` x `height_px` tree view with every
    label >= `min_font_px` (presenter mode): the whole tree if it fits, else at most 8, 4, 2,
    then 1 children per node, then depth caps from the deepest level up; highlighted and
    `keep` nodes and their ancestors are always drawn (fold_tree). When the path to a deep
    highlight alone is too tall, the same caps again with `chains` (tree_items): runs of
    ancestors drawn as one box, fold summaries on one line; then with `chain_marked` too (a
    step that highlights a whole deep path: its runs of one role drawn as one box of that
    role). When nothing fits, the most folded scene (the view then pans around its
    highlight)."""
    scene = tree_scene(snapshot, **items)
    if fits(scene, width_px, height_px, min_font_px):
        return scene
    depth: dict[int, int] = {}
    for node in snapshot.nodes:  # parents come before their children
        depth[node.id] = depth.get(node.parent, -1) + 1
    caps = [(c, None) for c in FIT_CHILDREN]
    caps += [(1, d) for d in range(max(depth.values(), default=0) - 1, 0, -1)]
    for chains, marked in ((False, False), (True, False), (True, True)):
        for max_children, max_depth in caps:
            scene = tree_scene(snapshot, **{**items, "max_children": max_children,
                                            "max_depth": max_depth, "chains": chains,
                                            "chain_marked": marked})
            if fits(scene, width_px, height_px, min_font_px):
                return scene
    return scene


def match_path(snapshot: TreeSnapshot, token_ids: Sequence[int]) -> list[int]:
    """Node ids a match of `token_ids` walks (whole edges and the one it ends inside), root
    excluded; reads the snapshot only (the default namespace)."""
    kids: dict[int, list[Any]] = {}
    for n in snapshot.nodes:
        if n.parent is not None and n.extra_key is None and n.cache_salt is None:
            kids.setdefault(n.parent, []).append(n)
    path, at, nid = [], 0, 0
    while at < len(token_ids):
        first = tuple(token_ids[at:at + 1])
        child = next((c for c in kids.get(nid, ()) if c.token_ids[:1] == first), None)
        if child is None:
            break
        path.append(child.id)
        edge = child.token_ids
        k = 0
        while k < len(edge) and at + k < len(token_ids) and edge[k] == token_ids[at + k]:
            k += 1
        at += k
        if k < len(edge):
            break
        nid = child.id
    return path

# ---------------------------------------------------------------- the words
# vLLM's words too (block, ref_cnt, free queue). `role_of` maps an event to the nodes it
# highlights; `narrate` says one micro-event given the tree just before it (a `TreeModel`, or any
# object with the same `nodes`), who owns each node and the step's context; `lock_walk_line` and
# `admitted_line` say the Live page's condensed lines; `node_line` a node's details (KV slots as
# slot ranges); `step_lines`, `step_caption` and `step_highlight` say one step of an event log
# (the Trace debugger's narration, caption and highlight). The CLI's demo has words of its own
# (radix may not import viz).


def role_of(e: ev.Event) -> dict[int, str]:
    """Node id -> role for one micro-event (empty for events that touch no node visibly).

    >>> role_of(ev.LockChanged(7, 1, 1, 12))
    {7: 'lock'}
    """
    if isinstance(e, ev.NodeSplit):
        return {e.node_id: "split", e.new_node_id: "split"}
    if isinstance(e, ev.NodeInserted):
        return {e.node_id: "new"}
    if isinstance(e, ev.LockChanged):
        return {e.node_id: "lock"}
    if isinstance(e, ev.NodeEvicted):
        return {e.node_id: "evicted"}
    if isinstance(e, ev.PrefixMatched | ev.HitCounted):
        return {n: "matched" for n in e.node_ids}
    return {}


def step_roles(events: Iterable[ev.Event], present: Iterable[int] = ()) -> dict[int, str]:
    """Roles of a whole step; a node touched twice keeps its strongest role (new over split
    over evicted over lock over matched). With `present`, only those nodes (the root never).

    insert [1, 2, 4] after [1, 2, 3]: node 1 splits (prefix 2), leaf 3 grows, HitCounted
    names 2 and 3: {1: "split", 2: "split", 3: "new"}.
    """
    roles: dict[int, str] = {}
    for e in events:
        for nid, role in role_of(e).items():
            if RANK[role] < RANK.get(roles.get(nid, ""), 9):
                roles[nid] = role
    keep = set(present)
    return {i: r for i, r in roles.items() if i != 0 and (not keep or i in keep)}


def build_owners(steps: Iterable[Sequence[ev.Event]]) -> dict[int, str]:
    """Node id -> rid of the step that inserted it; a split's new prefix node keeps the owner.

    >>> s = [[ev.StepStarted(0, "insert", "R1"), ev.NodeInserted(1, 0, (7,), (1,), 0, 0.0)]]
    >>> build_owners(s)
    {1: 'R1'}
    """
    owners: dict[int, str] = {}
    started, inserted, split = ev.StepStarted, ev.NodeInserted, ev.NodeSplit
    for events in steps:  # exact classes (events are final), compared by identity: the hot loop
        rid = None
        for e in events:
            kind = e.__class__
            if kind is started:
                if rid is None:
                    rid = e.rid
            elif kind is inserted:
                if rid:
                    owners[e.node_id] = rid
            elif kind is split and e.node_id in owners:
                owners[e.new_node_id] = owners[e.node_id]
    return owners


def depth_tokens(model: TreeModel, node_id: int) -> int:
    """Tokens on the path from the root down to the end of `node_id`'s edge (looked up by id
    in `model.nodes` hop by hop, so a PathBefore's copies are read, not the live nodes)."""
    total, nodes = 0, model.nodes
    while node_id in nodes and node_id != 0:
        node = nodes[node_id]
        total += len(node.key)
        node_id = node.parent.id
    return total


def hops_to_root(model: TreeModel, node_id: int) -> int:
    """Nodes from `node_id` up to the root, the root excluded (a lock walk's length)."""
    n, nodes = 0, model.nodes
    while node_id in nodes and node_id != 0:
        n += 1
        node_id = nodes[node_id].parent.id
    return n


def tokens(n: int) -> str:
    """A token count with its noun: tokens(1) -> '1 token', tokens(2151) -> '2,151 tokens'."""
    return f"{n:,} token" + ("" if n == 1 else "s")


def _who(rid: str | None) -> str:
    return rid or "a call"


FINISH_OPS = ("cache_finished_req", "release_kv_cache", "checkpoint", "cache_unfinished_req")


def split_line(e: ev.NodeSplit, before: Any, owners: Mapping[int, str], rid: str | None,
               key_len: int | None = None, boundary: bool = False) -> str:
    """A split, and why it happened there; `key_len` (the step's match key) explains a split
    at the key's end: SGLang matches at most input_len - 1 tokens. `boundary`: the split of a
    finish or checkpoint's second insert, at the prompt's end (`prompt_boundary`)."""
    old = before.nodes[e.node_id]
    at = depth_tokens(before, e.parent_id) + e.split_len
    owner = owners.get(e.node_id)
    rest = len(old.key) - e.split_len
    if boundary:
        return (f"{_who(rid)} splits its own leaf #{e.node_id} at the prompt boundary, token "
                f"{at:,}: {e.split_len:,} prompt + {rest:,} output token{'s' * (rest != 1)} "
                f"(new prefix "
                f"#{e.new_node_id}). SGLang 0.5.23 inserts prompt + output, then the prompt "
                "alone with priority + 1, so eviction can drop the output and keep the "
                "reusable prompt; the seed chapter's cache_finished_req inserted once and "
                "kept them in one leaf" + split_time_note(e))
    whose = f"leaves {owner}" if owner and owner != rid else "leaves the cached path"
    line = (f"{_who(rid)} {whose} at token {at:,}: node #{e.node_id} splits into "
            f"{e.split_len:,} + {rest:,} (new prefix #{e.new_node_id})")
    if key_len is not None and at == key_len:
        line += (f". The match asked for {tokens(key_len)}, the prompt less its last one "
                 f"(input_len - 1 = {key_len + 1:,} - 1): SGLang always computes the last prompt "
                 "token again, for its logits, so even an exact repeat splits here")
    return line + split_time_note(e)


def prompt_boundary(e: ev.Event, op: str | None, earlier: Sequence[ev.Event]) -> bool:
    """A split is the prompt-boundary split when a finish or checkpoint step makes it after
    its first insert ended (that insert's HitCounted came first): the prompt's re-insert.

    >>> split = ev.NodeSplit(1, 2, 0, 5, 0.0)
    >>> prompt_boundary(split, "cache_finished_req", [ev.HitCounted((1,), 0, True)])
    True
    >>> prompt_boundary(split, "cache_finished_req", [])  # the first insert leaving a path
    False
    """
    return (isinstance(e, ev.NodeSplit) and op in FINISH_OPS
            and any(isinstance(x, ev.HitCounted) for x in earlier))


def narrate(e: ev.Event, before: Any, owners: Mapping[int, str], rid: str | None,
            key_len: int | None = None, *, op: str | None = None,
            earlier: Sequence[ev.Event] = ()) -> str:
    """The line for event `e`, given the tree `before` it, the owners and the step's rid;
    `op` (the step's public call) and `earlier` (its micro-events before `e`) let the words
    say where SGLang 0.5.23's request lifecycle differs from the seed chapter."""
    if isinstance(e, ev.StepStarted):
        return step_line(e)
    if isinstance(e, ev.NodeSplit):
        return split_line(e, before, owners, rid, key_len, prompt_boundary(e, op, earlier))
    if isinstance(e, ev.NodeInserted):
        line = (f"{_who(rid)} grows a new leaf #{e.node_id} of {tokens(len(e.token_ids))} "
                f"under #{e.parent_id}")
        if op in ("checkpoint", "cache_unfinished_req"):
            line += (". SGLang 0.5.23 checkpoints a request's prompt right after its prefill, "
                     "so requests that arrive while it decodes already hit it; the seed "
                     "chapter cached a prompt at finish (or per chunk, when chunked)")
        return line
    if isinstance(e, ev.PrefixMatched):
        return (f"{_who(rid)} matches {e.prefix_len:,} of {tokens(e.key_len)} "
                f"over {len(e.node_ids)} node(s)")
    if isinstance(e, ev.LockChanged):
        return lock_hop_line(e, before, rid)
    if isinstance(e, ev.LeafSetChanged):
        parts = [f"+#{n}" for n in e.added] + [f"-#{n}" for n in e.removed]
        return "evictable leaves: " + " ".join(parts)
    if isinstance(e, ev.NodeEvicted):
        return (f"evict pops leaf #{e.node_id} ({tokens(e.num_tokens)}) by policy order, "
                f"sort key {e.sort_key}")
    if isinstance(e, ev.NodesTouched):
        return f"last access time {e.time:g} on {len(e.node_ids)} node(s)"
    if isinstance(e, ev.HitCounted):
        return hit_line(e)
    if isinstance(e, ev.CacheReset):
        return "reset: the tree is empty again"
    if isinstance(e, ev.StepEnded):
        return f"step {e.step} ends"
    if isinstance(e, ev.RequestAdmitted):
        return admitted_line(e)
    if isinstance(e, ev.RequestRetracted):
        return f"{e.rid} retracted ({e.reason}): {e.freed_slots:,} slots back to the pool"
    return type(e).__name__


def step_line(e: ev.StepStarted) -> str:
    """A step's first line; an eviction says that the allocator asks only for its shortfall.

    >>> step_line(ev.StepStarted(3, "match_prefix", "R2", "key of 10 tokens"))
    'step 3: R2 calls match_prefix (key of 10 tokens)'
    """
    detail = f" ({e.detail})" if e.detail else ""
    who = f"{e.rid} calls " if e.rid else ""
    line = f"step {e.step}: {who}{e.op}{detail}"
    if e.op == "evict":
        line += (": when allocation calls it, only the shortfall (tokens wanted - free slots): "
                 "SGLang 0.5.23 evicts what the allocator lacks, where the seed chapter "
                 "evicted all the tokens wanted")
    return line


def hit_line(e: ev.HitCounted) -> str:
    """An insert's hit counting: once per request and node (SGLang 0.5.23's inserted_len).

    >>> hit_line(ev.HitCounted((4, 7, 9), 1, True, 2))[:43]
    'hit_count +1 on 1 of 3 node(s), priority 1:'
    """
    n, first = len(e.node_ids), e.first_counted
    if not e.counted:
        return (f"priority {e.priority} on {n} node(s), no hit counted: every node ends within "
                "what this request inserted before (SGLang 0.5.23 counts a request's hit on a "
                "node once, by its inserted_len; the seed chapter skipped chunked inserts)")
    line = f"hit_count +1 on {n - first} of {n} node(s), priority {e.priority}"
    if first:
        line += (f": the first {first} end within what this request inserted before, and "
                 "SGLang 0.5.23 counts a request's hit on a node once (inserted_len)")
    return line


def lock_hop_line(e: ev.LockChanged, before: Any, rid: str | None) -> str:
    """One hop of a lock walk: the node, its lock_ref before -> after, tokens moved, and the
    hops left to the root."""
    verb = "locks" if e.delta > 0 else "unlocks"
    moved = ""
    if e.size_moved:
        src, dst = ("evictable", "protected") if e.delta > 0 else ("protected", "evictable")
        moved = f"; its {tokens(e.size_moved)} move {src} -> {dst}"
    left = hops_to_root(before, e.node_id) - 1
    where = "the last hop below the root" if left == 0 else f"{left} more hop(s) to the root"
    return (f"{_who(rid)} {verb} #{e.node_id}: lock_ref {e.lock_ref - e.delta} -> "
            f"{e.lock_ref}{moved} ({where})")


def lock_walk_line(rid: str | None, hops: Sequence[ev.LockChanged]) -> str:
    """A whole lock walk in one line, for the Live page.

    >>> lock_walk_line("turn5.5", [ev.LockChanged(9, 1, 1, 40), ev.LockChanged(4, 2, 1, 0)])
    'turn5.5 locks #9 -> #4, 2 hops up to the root: lock_ref 1, 2; 40 tokens now protected'
    """
    verb, dst = ("locks", "protected") if hops[0].delta > 0 else ("unlocks", "evictable")
    path = " -> ".join(f"#{h.node_id}" for h in hops)
    refs = ", ".join(str(h.lock_ref) for h in hops)
    moved = sum(h.size_moved for h in hops)
    tail = f"; {tokens(moved)} now {dst}" if moved else ""
    n = len(hops)
    return (f"{_who(rid)} {verb} {path}, {n} hop{'s' if n != 1 else ''} up to the root: "
            f"lock_ref {refs}{tail}")


def admitted_line(e: ev.RequestAdmitted) -> str:
    """An admission in words.

    >>> admitted_line(ev.RequestAdmitted("req-2", 300, 12, False, 4000))
    'req-2 admitted: 300 tokens from the tree, 12 to prefill'
    """
    more = " (chunked: more next round)" if e.chunked else ""
    return (f"{e.rid} admitted: {tokens(e.prefix_len)} from the tree, "
            f"{e.extend_len:,} to prefill{more}")


def told_line(told: Any, owners: Mapping[int, str]) -> str:
    """One Live-page line for a `scenarios.live.Told` record."""
    e = told.event
    if isinstance(e, tuple):  # a lock walk
        return lock_walk_line(told.rid, e)
    who = told.rid or "the scheduler's match"
    if isinstance(e, ev.NodeSplit):
        return split_line(e, told.before, owners, who, told.key_len)
    return narrate(e, None, owners, who)


def slot_ranges(slot_ids: Sequence[int], max_runs: int = 4) -> str:
    """KV slots as runs: [5, 6, 7, 9] -> '5..7, 9' (4 slots)."""
    runs: list[list[int]] = []
    for s in slot_ids:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    parts = [f"{a:,}" if a == b else f"{a:,}..{b:,}" for a, b in runs[:max_runs]]
    more = f", … {len(runs) - max_runs:,} more runs" if len(runs) > max_runs else ""
    return ", ".join(parts) + more + f" ({len(slot_ids):,} slots)"


def node_line(node: Any, owner: str | None = None) -> str:
    """A node's details: tokens, KV slots (as slot ranges: a slot is a place in the KV pool,
    not a token id), lock_ref, hits, times, priority."""
    who = f" (inserted by {owner})" if owner else ""
    return (f"Node #{node.id}{who}: {tokens(len(node.token_ids))}, first ids "
            f"{list(node.token_ids[:6])}; KV slots {slot_ranges(node.slot_ids)}; lock_ref "
            f"{node.lock_ref}, hit_count {node.hit_count}, created t={node.creation_time:g}, last "
            f"access t={node.last_access_time:g}, priority {node.priority}")


def step_highlight(events: list[Any], snapshot: Any) -> dict[int, str]:
    """Node id -> role for what one step did, over the nodes still in `snapshot`.

    insert [1, 2, 3], then insert [1, 2, 4]: node 1 splits into prefix 2 + node 1, leaf 3
    grows, the insert's hit count touches 2 and 3: {1: "split", 2: "split", 3: "new"}.
    """
    return step_roles(events, (n.id for n in snapshot.nodes))


def step_caption(events: list[Any]) -> str:
    """The step just played, numbered as the step box counts (steps done, from 1): the tree
    after step 12 shows the cache's step #11 (the cache counts from 0), so
    'step 12: R5 cache_finished_req (7 events; the cache's step #11)'."""
    first = events[0]
    rid = f" {first.rid}" if getattr(first, "rid", None) else ""
    return (f"step {first.step + 1:,}:{rid} {first.op} ({len(events):,} events; the cache's "
            f"step #{first.step:,})")


def step_lines(log: Any, step: int, owners: dict[int, str] | None = None,
               max_lines: int = 40) -> list[str]:
    """The narration of log step `step` (0-based), one line per micro-event that says something
    (`narrate`; a finish's prompt-boundary split says so), the first `max_lines` of them.
    `owners`: node id -> rid (build_owners over the log; built here when None)."""
    events = log.events_of(step)
    first = events[0]
    if owners is None:
        owners = build_owners(log.steps)
    model = log.model_at(step)
    micro = log.micro_events(step)
    key_len = next((e.key_len for e in micro if isinstance(e, ev.PrefixMatched)), None)
    # numbered as the step box counts (from 1), as step_caption does
    lines = [narrate(replace(first, step=first.step + 1), model, owners, first.rid)]
    for k, e in enumerate(micro):
        if len(lines) >= max_lines:
            lines.append(f"... {len(micro) - k:,} more events")
            break
        if not isinstance(e, ev.NodesTouched | ev.LeafSetChanged):
            lines.append(narrate(e, model, owners, first.rid, key_len, op=first.op,
                                 earlier=micro[:k]))
        model.apply(e)
    return lines
