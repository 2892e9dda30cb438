"""A radix-tree snapshot as a picture: the scene (node boxes and edges with stable ids, laid
out, folded when big) for viz/component's tree view. Follows SGLang's RadixCache picture (the
tokens live on the edge into a node; r=lock_ref; evictable leaves dashed and green, locked nodes
blue: viz/roles.py). Node `n<id>` and edge `e<child id>` keep their ids across snapshots, so the
browser animates a split or an eviction in place; big trees fold (viz/fold.py) and `place` lays
them out (viz/layout.py). viz/dot.py writes the same items as DOT for the download. Leaves out:
page boundaries inside an edge; the step words (viz/words.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from radix.tree.snapshot import TreeSnapshot
from viz.fold import chain_items, chain_runs, chained, fits, fold_items, fold_tree
from viz.layout import Box, Line, place
from viz.roles import FILL_CACHED, FILL_EVICTABLE, FILL_PROTECTED, ROLES

# `fit_tree_scene` folds just enough for a view size and label size (presenter mode).

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


def tree_items(snapshot: TreeSnapshot, *, decode: Decode | None = None,
               highlight: Mapping[int, str] | None = None, max_children: int | None = None,
               max_depth: int | None = None, keep: Iterable[int] = (),
               prefer: Sequence[int] = (), names: Mapping[int, str] | None = None,
               ids: Callable[[Any], str] | None = None,
               chains: bool = False) -> tuple[list[Box], list[Line]]:
    """The boxes and edges to draw, in pre-order; `highlight` maps node id -> a role of ROLES,
    `names` adds a second label line to some nodes ("system prompt S"), `prefer` ranks some
    children ahead when a node folds (fold_tree), `ids` shows an edge's
    tokens in place of the token preview (a Mooncake trace's hash ids). `chains` (with a fold):
    each run of two or more nodes drawn only as ancestors of highlighted or kept ones becomes
    one box (`chain_runs`), and fold summaries take one line (their counts go to the tooltip);
    highlighted and kept nodes are always boxes of their own.

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
    kept = [*highlight, *keep]
    runs = chain_runs(snapshot, plan, kept) if chains and plan else ()
    gone, into, heads = chained(snapshot, plan, runs) if runs else (set(), {}, {})
    boxes, lines = [], []
    for node in snapshot.nodes:
        if node.id in heads:
            box, line = chain_items(heads[node.id])
            boxes.append(box)
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
        box, line = fold_items(fold)
        if chains:
            box = box._replace(label=box.label.split("\n")[0],
                               tooltip=f"{box.tooltip}; {box.label.split(chr(10), 1)[1]}")
        boxes.append(box)
        lines.append(line._replace(source=into.get(fold.parent, line.source)))
    return boxes, lines


def tree_scene(snapshot: TreeSnapshot, *, rankdir: str = "TB", **items: Any) -> dict[str, Any]:
    """The laid-out scene of `tree_items(snapshot, **items)` (`place`)."""
    boxes, lines = tree_items(snapshot, **items)
    return place(boxes, lines, rankdir)


FIT_CHILDREN = (8, 4, 2, 1)  # max_children tried in turn, then depth caps from the deepest
FOLD_MIN_NODES = 16  # a tree this small is drawn whole: every node of it is the lesson


def fit_tree_scene(snapshot: TreeSnapshot, width_px: float, height_px: float,
                   min_font_px: float, *, keep_locked: bool = True,
                   whole_below: int = FOLD_MIN_NODES, **items: Any) -> dict[str, Any]:
    """`tree_scene` folded just enough to fit a `width_px` x `height_px` tree view with every
    label >= `min_font_px` (presenter mode), never folding what the frame is about: the
    highlighted nodes, the `keep` ones (the nodes its sentence names) and, with `keep_locked`,
    every node with lock_ref > 0 (the paths running requests hold), each with its ancestors,
    stay boxes of their own (fold_tree). The whole tree if it fits or has at most
    `whole_below` nodes; else at most 8, 4, 2, then 1 children per node, then depth caps from
    the deepest level up; then the same with `chains` (tree_items: runs of ancestors that are
    none of those drawn as one box, fold summaries on one line). When nothing fits, the most
    folded of them: the tree view then scrolls at that label size (viz/component), rather than
    fold a node the frame is about."""
    scene = tree_scene(snapshot, **items)
    if fits(scene, width_px, height_px, min_font_px) or len(snapshot.nodes) <= whole_below:
        return scene
    if keep_locked:
        items = {**items, "keep": [*items.get("keep", ()),
                                   *(n.id for n in snapshot.nodes if n.lock_ref > 0)]}
    depth: dict[int, int] = {}
    for node in snapshot.nodes:  # parents come before their children
        depth[node.id] = depth.get(node.parent, -1) + 1
    caps = [(c, None) for c in FIT_CHILDREN]
    caps += [(1, d) for d in range(max(depth.values(), default=0) - 1, 0, -1)]
    for chains in (False, True):
        for max_children, max_depth in caps:
            scene = tree_scene(snapshot, **{**items, "max_children": max_children,
                                            "max_depth": max_depth, "chains": chains})
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
