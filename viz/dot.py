"""A radix-tree snapshot as Graphviz DOT, with ids that stay put so d3-graphviz can animate.

Follows SGLang's RadixCache picture: the tokens live on the edge into a node (a node's `key`),
so each edge is labelled with its token count and a decoded preview; each node shows its
`lock_ref` (r=N); evictable leaves (lock_ref 0, no children) are dashed and green. Node `n<id>`
and edge `e<child id>` keep their DOT ids across snapshots, so a split morphs the old edge and
grows the new one instead of re-laying out. Big trees fold (`fold_tree`): at most
`max_children` children per node are drawn, the rest become one summary node `m<parent id>`
counted from the full snapshot. Leaves out: page boundaries inside an edge.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

Decode = Callable[[list[int]], str]

# Highlight roles for one micro-event: role -> (pen colour, pen width).
ROLES: dict[str, tuple[str, float]] = {
    "matched": ("#1f77b4", 2.5),  # on the path a match walked
    "split": ("#ff7f0e", 3.0),  # a node that split, and its new prefix node
    "new": ("#2ca02c", 3.0),  # a leaf that was just inserted
    "lock": ("#9467bd", 3.0),  # a hop of a lock walk (inc/dec_lock_ref)
    "evicted": ("#d62728", 3.0),  # a leaf popped by evict
    "selected": ("#000000", 2.5),  # the node the user clicked
}
FILL_PROTECTED = "#dbe8f6"  # lock_ref > 0: in use by a running request
FILL_EVICTABLE = "#e3f4e1"  # an evictable leaf
FILL_CACHED = "#ffffff"  # cached, not a leaf (or locked below)


def _quote(text: str) -> str:
    """A DOT double-quoted string: escapes backslash, quote and newlines (as \\n)."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + out.replace("\r", "").replace("\n", "\\n") + '"'


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


def _node_attrs(node: Any, role: str | None) -> dict[str, str]:
    if node.parent is None:
        label = "root"
    else:
        label = f"#{node.id}  r={node.lock_ref}"
    style = ["filled", "rounded"]
    if node.lock_ref > 0:
        fill = FILL_PROTECTED
    elif node.evictable_leaf:
        fill, style = FILL_EVICTABLE, style + ["dashed"]
    else:
        fill = FILL_CACHED
    color, width = ROLES.get(role, ("#555555", 1.0)) if role else ("#555555", 1.0)
    tooltip = f"node {node.id}: {len(node.token_ids):,} tokens, lock_ref {node.lock_ref}"
    return {
        "id": f"n{node.id}", "label": label, "style": ",".join(style), "fillcolor": fill,
        "color": color, "penwidth": f"{width:g}", "tooltip": tooltip,
    }


def _edge_attrs(node: Any, role: str | None, decode: Decode | None) -> dict[str, str]:
    n = len(node.token_ids)
    label = f"{n:,} tok\n{token_preview(node.token_ids, decode)}"
    color, width = ROLES.get(role, ("#777777", 1.2)) if role else ("#777777", 1.2)
    return {"id": f"e{node.id}", "label": label, "color": color, "penwidth": f"{width:g}"}


def _attr_list(attrs: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())


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


def fold_tree(snapshot: Any, max_children: int | None = None, max_depth: int | None = None,
              keep: Iterable[int] = ()) -> FoldPlan:
    """Which nodes to draw: at most `max_children` children per node, none below `max_depth`
    (the root is depth 0), except the nodes in `keep` and their ancestors, always drawn.
    A node's children are ranked: kept ones, then locked (lock_ref > 0), then the largest
    subtrees by tokens, then child order; the rest fold into one `Fold`. A single leftover
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

    def split(children: list[int], limit: int, capped: bool) -> tuple[list[int], Fold | None]:
        if len(children) <= limit:
            return children, None
        order = sorted(children, key=lambda c: (c not in must, by_id[c].lock_ref == 0,
                                               -total[c][1], rank[c]))
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


def _fold_lines(fold: Fold) -> list[str]:
    """The summary node and its edge. 88 folded leaves of 3,916 tokens, none locked:
    label "+88 more\\n88 evictable leaves" (zero counts left out), edge label "3,916 tok"."""
    more = f"+{fold.num_children:,} more"
    if fold.num_nodes > fold.num_children:
        more += f" ({fold.num_nodes:,} nodes)"
    counts = [f"{n:,} {what}" for n, what in ((fold.locked, "locked"),
                                              (fold.evictable_leaves, "evictable leaves")) if n]
    fill = (FILL_PROTECTED if fold.locked else
            FILL_EVICTABLE if fold.evictable_leaves else FILL_CACHED)
    node = {
        "id": f"m{fold.parent}",
        "label": more + "\n" + (", ".join(counts) or "cached"),
        "style": "filled,rounded" + ("" if fold.locked else ",dashed"), "fillcolor": fill,
        "color": "#555555", "penwidth": "1",
        "tooltip": (f"{fold.num_children:,} children of node {fold.parent} not drawn: "
                    f"{fold.num_nodes:,} nodes, {fold.tokens:,} tokens"),
    }
    edge = {"id": f"em{fold.parent}", "label": f"{fold.tokens:,} tok", "color": "#777777",
            "penwidth": "1.2"}
    return [f'  "m{fold.parent}" [{_attr_list(node)}];',
            f'  "n{fold.parent}" -> "m{fold.parent}" [{_attr_list(edge)}];']


def tree_to_dot(
    snapshot: Any,
    *,
    decode: Decode | None = None,
    highlight: Mapping[int, str] | None = None,
    rankdir: str = "TB",
    max_children: int | None = None,
    max_depth: int | None = None,
    keep: Iterable[int] = (),
) -> str:
    """The DOT of a `TreeSnapshot`; `highlight` maps node id -> a role of `ROLES`.

    A root with one 3-token child:
    `tree_to_dot(snap)` has `"n0" [id="n0", label="root", ...]`, `"n1" [...label="#1  r=0"...]`
    and `"n0" -> "n1" [id="e1", label="3 tok\\n[1 2 3]", ...]`. With `max_children` or
    `max_depth` the tree folds (`fold_tree`; highlighted and `keep` nodes are always drawn).
    """
    if rankdir not in ("TB", "LR"):
        raise ValueError(f"rankdir must be 'TB' or 'LR', got {rankdir!r}")
    highlight = highlight or {}
    for role in highlight.values():
        if role not in ROLES:
            raise ValueError(f"unknown highlight role {role!r}; known: {sorted(ROLES)}")
    plan = None
    if max_children is not None or max_depth is not None:
        plan = fold_tree(snapshot, max_children, max_depth, [*highlight, *keep])
    lines = [
        "digraph radix {",
        f'  graph [rankdir={rankdir}, nodesep=0.25, ranksep=0.35, bgcolor="transparent"];',
        '  node [shape=box, fontname="DejaVu Sans", fontsize=11, height=0.3, margin="0.08,0.03"];',
        '  edge [fontname="DejaVu Sans", fontsize=9, arrowsize=0.6];',
    ]
    for node in snapshot.nodes:
        if plan is not None and node.id not in plan.drawn:
            continue
        role = highlight.get(node.id)
        lines.append(f'  "n{node.id}" [{_attr_list(_node_attrs(node, role))}];')
        if node.parent is not None:
            attrs = _edge_attrs(node, role, decode)
            lines.append(f'  "n{node.parent}" -> "n{node.id}" [{_attr_list(attrs)}];')
    for fold in plan.folds if plan is not None else ():
        lines += _fold_lines(fold)
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_to_svg(dot: str, timeout_s: float = 30.0) -> str:
    """Lays out DOT with Graphviz's `dot` program (for downloads); RuntimeError if it is missing."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("Graphviz `dot` is not installed (apt-get install graphviz)")
    done = subprocess.run(
        [exe, "-Tsvg"], input=dot, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"dot failed: {done.stderr.strip()[:300]}")
    return done.stdout
