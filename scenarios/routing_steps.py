"""What one step of the Cluster page changed: each replica's tree and the router's own view.

`step_changes(before, after)` compares two kept frames (scenarios/routing.py `Frame`): per
replica, the nodes that appeared (new ids: a prompt's new suffix, or the new parent a split
made), the nodes that went (evicted, as "ghosts": id, parent, tokens, so the page can still draw
them once, faded) and the net tokens; in the router's view, the boxes that are new or changed
(the approximate tree's merged chains, keyed by their first block's key: a box that grew, split
or gained a replica counts), or kv-overlap's blocks per replica. Node ids are the tree's own,
stable for a node's life (a split keeps the child's id and gives the new prefix a new one), so
"appeared" means what it says. A step is always
compared with the kept frame before it: on a long upload with keyframes that spans several
requests, and the page says so. Leaves out: drawing (viz/routing.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Ghost(NamedTuple):
    id: int  # the evicted node's id in the tree before
    parent: int  # its parent's id then (drawn under it, or under the root if that went too)
    tokens: int


class ReplicaChange(NamedTuple):
    added: frozenset[int]  # node ids that appeared
    gone: tuple[Ghost, ...]  # nodes that went (evicted), in the old tree's order
    tokens: int  # cached tokens after minus before

    @property
    def any(self) -> bool:
        return bool(self.added or self.gone or self.tokens)


class StepChange(NamedTuple):
    replicas: tuple[ReplicaChange, ...]
    view_added: frozenset[int]  # the router view's new or changed boxes (chain keys)
    view_blocks: tuple[int, ...]  # kv-overlap: blocks indexed per replica, after minus before
    span: int  # requests between the two frames (1 unless keyframes were kept)


def step_changes(before: Any | None, after: Any) -> StepChange:
    """`after`'s trees and router view against `before`'s (None: the empty cluster).

    >>> from types import SimpleNamespace as N
    >>> node = lambda i, p, n: N(id=i, parent=p, token_ids=(0,) * n)
    >>> t0 = N(nodes=(node(0, None, 0), node(1, 0, 4)), total_size=4)
    >>> t1 = N(nodes=(node(0, None, 0), node(2, 0, 3)), total_size=3)
    >>> view = {"kind": "approx-tree", "chains": [(7, 0, 1, (0,))]}
    >>> c = step_changes(N(after=0, trees=(t0,), view=view), N(after=1, trees=(t1,), view=view))
    >>> c.replicas[0].added, c.replicas[0].gone, c.replicas[0].tokens, c.view_added, c.span
    (frozenset({2}), (Ghost(id=1, parent=0, tokens=4),), -1, frozenset(), 1)
    """
    reps = []
    for k, tree in enumerate(after.trees):
        old = before.trees[k].nodes if before is not None else ()
        old_ids = {n.id for n in old}
        new_ids = {n.id for n in tree.nodes}
        gone = tuple(Ghost(n.id, n.parent, len(n.token_ids)) for n in old
                     if n.id not in new_ids and n.parent is not None)
        was = before.trees[k].total_size if before is not None else 0
        reps.append(ReplicaChange(frozenset(new_ids - old_ids - {0}), gone,
                                  tree.total_size - was))
    old_view = before.view if before is not None else {"kind": after.view["kind"]}
    added: frozenset[int] = frozenset()
    blocks: tuple[int, ...] = ()
    if after.view["kind"] == "approx-tree":
        old_chains = set(old_view.get("chains", ()))
        added = frozenset(c[0] for c in after.view["chains"] if c not in old_chains)
    elif after.view["kind"] == "block-index":
        was_blocks = old_view.get("blocks") or [0] * len(after.view["blocks"])
        blocks = tuple(a - b for a, b in zip(after.view["blocks"], was_blocks, strict=True))
    span = after.after - (before.after if before is not None else -1)
    return StepChange(tuple(reps), added, blocks, span)


def change_note(change: ReplicaChange) -> str:
    """A replica's change in a few characters, for its heading: "+2 nodes, 1 evicted".

    >>> change_note(ReplicaChange(frozenset({4, 5}), (Ghost(3, 0, 9),), 12))
    '+2 nodes, 1 evicted'
    >>> change_note(ReplicaChange(frozenset(), (), 0))
    'no change'
    """
    parts = []
    if change.added:
        parts.append(f"+{len(change.added)} node{'s' * (len(change.added) != 1)}")
    if change.gone:
        parts.append(f"{len(change.gone)} evicted")
    if not parts and change.tokens:
        parts.append(f"{change.tokens:+,} tokens")
    return ", ".join(parts) or "no change"
