"""A radix-tree snapshot as a scene: node boxes and edges with stable ids, labels and colours.

Follows SGLang's RadixCache picture: the tokens live on the edge into a node (a node's `key`),
so each edge is labelled with its token count and a preview; each node shows its `lock_ref` (r=N);
evictable leaves (lock_ref 0, no children) are dashed and green, locked nodes blue. Node `n<id>`
and edge `e<child id>` keep their ids across snapshots, so the browser animates a split or an
eviction in place. Big trees fold (`fold_tree`): at most `max_children` children per node are
drawn, the rest become one summary node `m<parent id>` counted from the full snapshot;
`fit_tree_scene` folds just enough for a view size and label size (presenter mode).
`tree_scene` lays the items out (`place`, first below) as named fields for the browser;
viz/dot.py writes the same items as DOT for the download.

`place` follows dot's semantics for a tree (rank = depth, children in edge order, each parent
centred over its children, edge labels between the ranks) with a tidy layered layout that is
O(n): every subtree gets a band as wide as the wider of its own box and its children's bands, so
a split or a new leaf only moves the subtrees to its right. 1,000 nodes lay out in milliseconds,
where `dot` takes ~0.7 s (edge labels become virtual nodes). The cluster, host-tier and why
pictures place their own boxes with it.
Leaves out: page boundaries inside an edge; general graphs (a node with two parents keeps its
first tree edge; the rest are drawn but not laid out), spline routing (the browser draws each
edge as one cubic curve) and measured text widths (the browser widens a box whose text came out
wider than this estimate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from radix.tree.node import TreeSnapshot
from viz.words import FILL_CACHED, FILL_EVICTABLE, FILL_PROTECTED, ROLES

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
