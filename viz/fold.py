"""Folding a big tree to what can be drawn: at most so many children per node, no deeper than
a cap, the rest counted into one summary box `m<parent id>` per parent (from the full snapshot).

`fold_tree` picks what is drawn; `chain_runs` draws a run of only-children on the way to a kept
node as one box `c<first id>` (presenter mode: a deep lock path); `fits` says whether a laid-out
scene fits a tree view at a label size. Node ids stay put across folds, so the browser animates
in place. Leaves out: the boxes of nodes drawn one by one and the search for a fold that fits
(viz/scene.py's tree_items and fit_tree_scene).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from radix.tree.snapshot import TreeSnapshot
from viz.layout import EDGE_FONT, Box, Line
from viz.roles import FILL_CACHED, FILL_EVICTABLE, FILL_PROTECTED


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



def fold_items(fold: Fold) -> tuple[Box, Line]:
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



class Chain(NamedTuple):
    """Nodes on a path drawn as one box `c<first id>` (presenter mode: unlocked ancestors of a
    deep node the frame is about)."""
    ids: tuple[int, ...]  # top first; each the parent of the next
    parent: int  # the first node's parent (drawn)
    tokens: int  # tokens on the run's edges
    lock_refs: tuple[int, ...]  # each node's lock_ref, in `ids` order
    hidden: int  # drawn or folded nodes beside the run that the chain box leaves out


def chain_runs(snapshot: TreeSnapshot, plan: FoldPlan, kept: Iterable[int]
               ) -> tuple[Chain, ...]:
    """The runs of two or more drawn nodes that are drawn only as ancestors of `kept` ones
    (not the root, not kept), each the only child of the one before it on the way to a kept
    node; the run ends where the path branches or reaches a kept node. #6 kept on root > #2 >
    #1 > #4 > #5 > #6: one run (2, 1, 4, 5), drawn as one box; #1 kept too: the run (4, 5)."""
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
        if len(ids) >= 2:
            runs.append(ids)
    return tuple(_chain(by_id, plan, ids) for ids in runs)


def _chain(by_id: Mapping[int, Any], plan: FoldPlan, ids: list[int]) -> Chain:
    inside = set(ids)
    hidden = sum(1 for n in by_id.values() if n.id in plan.drawn and n.parent in inside
                 and n.id not in inside and n.parent != ids[-1])
    hidden += sum(f.num_nodes for f in plan.folds if f.parent in inside and f.parent != ids[-1])
    return Chain(tuple(ids), by_id[ids[0]].parent, sum(len(by_id[i].token_ids) for i in ids),
                 tuple(by_id[i].lock_ref for i in ids), hidden)


def chained(snapshot: TreeSnapshot, plan: FoldPlan,
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


def chain_items(chain: Chain) -> tuple[Box, Line]:
    """The chain's box and its edge. Run 2, 1, 4, 5 of 2,100 tokens, none locked: label
    "#2 … #5" newline "4 nodes, r=0", edge "2,100 tok"."""
    lo, hi = min(chain.lock_refs), max(chain.lock_refs)
    refs = f"r={lo}" if lo == hi else f"r={lo}..{hi}"
    box_id = f"c{chain.ids[0]}"
    label = f"#{chain.ids[0]} … #{chain.ids[-1]}\n{len(chain.ids)} nodes, {refs}"
    tooltip = (f"nodes {', '.join(f'#{i}' for i in chain.ids)} on the path, drawn as one box: "
               f"{chain.tokens:,} tokens")
    if chain.hidden:
        tooltip += f"; not drawn beside them: {chain.hidden:,} node(s)"
    fill = FILL_PROTECTED if hi > 0 else FILL_CACHED
    box = Box(box_id, label, fill, "#555555", 1.0, False, tooltip, "")
    return box, Line(f"e{box_id}", f"n{chain.parent}", box_id, f"{chain.tokens:,} tok",
                     "#777777", 1.2)


VIEW_PAD = 8.0  # scene units the tree view keeps around a scene (viz/component's PAD)


def fits(scene: Mapping[str, Any], width_px: float, height_px: float, min_font_px: float) -> bool:
    """Whether the tree view can show all of `scene` with its smallest label (an edge's, 9
    scene units) at `min_font_px`: the padded scene times min_font_px / 9 inside the host.
    A 200 x 100 scene at 14 px: 216 x 116 units x 1.556 = 336 x 180 px."""
    k = min_font_px / EDGE_FONT
    return ((scene["width"] + 2 * VIEW_PAD) * k <= width_px
            and (scene["height"] + 2 * VIEW_PAD) * k <= height_px)
