"""SGLang's component tree as a picture: each node's FULL lock, and per auxiliary component its
value or tombstone and lock (`swa: 128 tok r=0`, `swa: tombstone`, `mamba: state 6 r=1`,
`mamba: tombstone`), the edge labelled with the positions it covers (`1,600..1,900`), so that a
Mamba checkpoint reads as a state at its node's end position. The request's path is drawn in
two pens: `hit` up to the node every component accepted, `cut` past it where full attention
alone matched (the intersection's cut); a frame's changes in their own pens (viz/roles.py's
colours). Reads ComponentNodeState snapshots (radix/tree/unified_check.py), live or replayed;
big trees fold as viz/scene.py's do, never a highlighted node. Leaves out: the words
(viz/hybrid_words.py) and vLLM's groups (viz/group_grid.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from radix import events as ev
from viz.fold import fits, fold_items, fold_tree
from viz.layout import Box, Line, place
from viz.roles import FILL_CACHED, FILL_EVICTABLE, FILL_PROTECTED, ROLES
from viz.scene import FIT_CHILDREN, FOLD_MIN_NODES

# role -> (pen colour, pen width): the request's path and what a frame changed
PENS: dict[str, tuple[str, float]] = {
    "hit": ROLES["matched"],  # on the path to the node every component accepted
    "cut": ("#d62728", 3.0),  # full attention matched it, another component did not
    "new": ROLES["new"],  # inserted, or split, in this frame
    "stored": ("#2ca02c", 3.5),  # a component's value stored here (a checkpoint, a window)
    "tombstoned": ("#7f7f7f", 3.5),  # a component's value left: a tombstone now
    "lock": ROLES["lock"],  # a lock taken or released here
}
RANK = {"stored": 0, "tombstoned": 1, "cut": 2, "hit": 3, "new": 4, "lock": 5}
NAMES = {"swa": "swa", "mamba": "mamba"}


def spans(nodes: Sequence[Any]) -> dict[int, tuple[int, int]]:
    """Node id -> (start, end): the token positions its edge covers from the root.

    >>> from types import SimpleNamespace as N
    >>> spans([N(id=0, parent=None, token_ids=()), N(id=1, parent=0, token_ids=(5, 6))])
    {0: (0, 0), 1: (0, 2)}
    """
    out: dict[int, tuple[int, int]] = {}
    for n in nodes:  # pre-order: a parent comes first
        start = out[n.parent][1] if n.parent is not None else 0
        out[n.id] = (start, start + len(n.token_ids))
    return out


def component_lines(n: Any, components: Sequence[str]) -> list[str]:
    """A node's auxiliary components, one line each.

    >>> from types import SimpleNamespace as N
    >>> n = N(swa_slot_ids=None, swa_lock_ref=1, mamba_slot_ids=(6,), mamba_lock_ref=0)
    >>> component_lines(n, ("full", "swa", "mamba"))
    ['swa: tombstone  r=1', 'mamba: state 6  r=0']
    >>> n.mamba_slot_ids = None; component_lines(n, ("full", "mamba"))
    ['mamba: tombstone  r=0']
    """
    out = []
    if "swa" in components:
        v = n.swa_slot_ids
        held = "tombstone" if v is None else f"{len(v):,} tok"
        out.append(f"swa: {held}  r={n.swa_lock_ref}")
    if "mamba" in components:
        v = n.mamba_slot_ids
        held = "tombstone" if v is None else f"state {v[0]}"
        out.append(f"mamba: {held}  r={n.mamba_lock_ref}")
    return out


def component_box(n: Any, components: Sequence[str], role: str | None) -> Box:
    """`#id  r=lock_ref` over one line per auxiliary component; filled as viz/scene.py fills
    (locked blue, evictable leaf green and dashed)."""
    if n.parent is None:
        return Box("n0", "root", FILL_CACHED, "#555555", 1.0, False, "root", role or "")
    label = "\n".join([f"#{n.id}  r={n.lock_ref}", *component_lines(n, components)])
    fill, dashed = FILL_CACHED, False
    if n.lock_ref > 0:
        fill = FILL_PROTECTED
    elif n.evictable_leaf:
        fill, dashed = FILL_EVICTABLE, True
    stroke, width = PENS[role] if role else ("#555555", 1.0)
    tip = (f"node {n.id}: {len(n.token_ids):,} tokens, full lock_ref {n.lock_ref}; "
           + "; ".join(component_lines(n, components)))
    return Box(f"n{n.id}", label, fill, stroke, width, dashed, tip.rstrip("; "), role or "")


def component_items(nodes: Sequence[Any], components: Sequence[str],
                    highlight: Mapping[int, str] | None = None, plan: Any = None
                    ) -> tuple[list[Box], list[Line]]:
    """The boxes and edges of the nodes `plan` draws (all without one), edges labelled
    `N tok` over the positions they cover; folded children as viz/fold.py's summary boxes."""
    highlight = highlight or {}
    at = spans(nodes)
    boxes, lines = [], []
    for n in nodes:
        if plan is not None and n.id not in plan.drawn:
            continue
        role = highlight.get(n.id)
        boxes.append(component_box(n, components, role))
        if n.parent is not None:
            start, end = at[n.id]
            stroke, width = PENS[role] if role else ("#777777", 1.2)
            lines.append(Line(f"e{n.id}", f"n{n.parent}", f"n{n.id}",
                              f"{end - start:,} tok\n{start:,}..{end:,}", stroke, width))
    for fold in plan.folds if plan is not None else ():
        box, line = fold_items(fold)
        boxes.append(box)
        lines.append(line)
    return boxes, lines


def component_scene(nodes: Sequence[Any], components: Sequence[str],
                    highlight: Mapping[int, str] | None = None,
                    fit: tuple[float, float, float] | None = None,
                    max_children: int | None = None) -> dict[str, Any]:
    """The laid-out scene (viz/layout.py `place`). `max_children`: at most that many children
    a node (viz/fold.py's fold_tree; a trace's big tree). With `fit` (width px, height px,
    smallest label px: presenter mode) a tree of more than FOLD_MIN_NODES nodes that does not
    fit folds as fit_tree_scene does (8, 4, 2, then 1 children a node, then depth caps); the
    most folded when none fits. A fold keeps every highlighted and every locked node, with
    its ancestors."""
    snap = SimpleNamespace(nodes=tuple(nodes))
    keep = [*(highlight or {}), *(n.id for n in nodes if n.lock_ref > 0)]
    plan = None if max_children is None else fold_tree(snap, max_children, None, keep)
    scene = place(*component_items(nodes, components, highlight, plan), "TB")
    if fit is None or len(nodes) <= FOLD_MIN_NODES or fits(scene, *fit):
        return scene
    depth: dict[int, int] = {}
    for n in nodes:
        depth[n.id] = depth.get(n.parent, -1) + 1
    caps = [(c, None) for c in FIT_CHILDREN if max_children is None or c < max_children]
    caps += [(1, d) for d in range(max(depth.values()) - 1, 0, -1)]
    for most, max_depth in caps:
        plan = fold_tree(snap, most, max_depth, keep)
        scene = place(*component_items(nodes, components, highlight, plan), "TB")
        if fits(scene, *fit):
            break
    return scene


def walk_path(nodes: Sequence[Any], token_ids: Sequence[int], length: int) -> list[int]:
    """Ids of the nodes whose edges cover token_ids[:length] from the root, in order (a match
    splits its last node at `length`, so whole edges do).

    >>> from types import SimpleNamespace as N
    >>> t = [N(id=0, parent=None, token_ids=()), N(id=2, parent=0, token_ids=(1, 2)),
    ...      N(id=1, parent=2, token_ids=(3, 4)), N(id=3, parent=2, token_ids=(9,))]
    >>> walk_path(t, [1, 2, 3, 4, 5], 4), walk_path(t, [1, 2, 9], 3), walk_path(t, [7], 1)
    ([2, 1], [2, 3], [])
    """
    kids: dict[int, list[Any]] = {}
    for n in nodes:
        if n.parent is not None:
            kids.setdefault(n.parent, []).append(n)
    path, at, nid = [], 0, 0
    while at < length:
        child = next((c for c in kids.get(nid, ()) if len(c.token_ids)
                      and c.token_ids[0] == token_ids[at]), None)
        if child is None:
            break
        k = len(child.token_ids)
        if at + k > length or tuple(token_ids[at:at + k]) != tuple(child.token_ids):
            break
        path.append(child.id)
        at, nid = at + k, child.id
    return path


def match_highlight(nodes: Sequence[Any], token_ids: Sequence[int],
                    matched: ev.HybridPrefixMatched) -> dict[int, str]:
    """The match's path: `hit` up to its prefix_len, `cut` from there to full_kv_hit_length."""
    out = {nid: "cut" for nid in walk_path(nodes, token_ids, matched.full_kv_hit_length)}
    out.update({nid: "hit" for nid in matched.node_ids})
    return out


def change_roles(events: Iterable[ev.Event]) -> dict[int, str]:
    """Node id -> the strongest change a frame's events made there (RANK order)."""
    roles: dict[int, str] = {}

    def put(nid: int, role: str) -> None:
        if nid and RANK[role] < RANK.get(roles.get(nid, ""), 9):
            roles[nid] = role

    for e in events:
        if isinstance(e, ev.NodeInserted):
            put(e.node_id, "new")
        elif isinstance(e, ev.NodeSplit):
            put(e.new_node_id, "new")
        elif isinstance(e, ev.ComponentStored):
            put(e.node_id, "stored")
        elif isinstance(e, ev.ComponentTombstoned):
            put(e.node_id, "tombstoned")
        elif isinstance(e, ev.LockChanged | ev.ComponentLockChanged):
            put(e.node_id, "lock")
    return roles


def frame_highlight(nodes: Sequence[Any], events: Sequence[ev.Event],
                    token_ids: Sequence[int] | None) -> dict[int, str]:
    """What to outline in a frame: its changes over the match's path (when it has a match)."""
    out: dict[int, str] = {}
    match = next((e for e in events if isinstance(e, ev.HybridPrefixMatched)), None)
    if match is not None and token_ids is not None:
        out = match_highlight(nodes, token_ids, match)
    present = {n.id for n in nodes}
    for nid, role in change_roles(events).items():
        if nid in present and RANK[role] < RANK.get(out.get(nid, ""), 9):
            out[nid] = role
    return out
