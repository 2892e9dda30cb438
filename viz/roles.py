"""The highlight roles: which nodes an event or a step touched, and the pen each role draws with.

One table (ROLES) every page reads, after SGLang's RadixCache picture: evictable leaves dashed
and green, locked nodes blue; a step's strongest role wins (new over split over evicted over
lock over matched). Leaves out: the words for what happened (viz/words.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from radix import events as ev

# highlight role -> (pen colour, pen width)
ROLES: dict[str, tuple[str, float]] = {
    "matched": ("#1f77b4", 2.5),  # on the path a match walked
    "split": ("#ff7f0e", 3.0),  # a node that split, and its new prefix node
    "new": ("#2ca02c", 3.0),  # a leaf that was just inserted
    "lock": ("#9467bd", 3.5),  # a hop of a lock walk (inc/dec_lock_ref)
    "evicted": ("#d62728", 3.0),  # a leaf popped by evict
    "touched": ("#17becf", 3.0),  # its last access time was just written
    "named": ("#8c564b", 3.0),  # what a frame's sentence names: a step's node, a leaf set change
    "selected": ("#000000", 2.5),  # the node the user clicked
}
FILL_PROTECTED = "#dbe8f6"  # lock_ref > 0: in use by a running request
FILL_EVICTABLE = "#e3f4e1"  # an evictable leaf
FILL_CACHED = "#ffffff"  # cached, not a leaf (or locked below)
RANK = {"new": 0, "split": 1, "evicted": 2, "lock": 3, "matched": 4, "touched": 5, "named": 6,
        "selected": 7}
# a frame of their own in the Tour; a whole step's roles (the Trace debugger's) skip them
QUIET = (ev.NodesTouched, ev.LeafSetChanged, ev.CacheReset)


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
    if isinstance(e, ev.PrefixMatched) and not e.node_ids:
        return {0: "named"}  # an empty match stops at the root
    if isinstance(e, ev.PrefixMatched | ev.HitCounted):
        return {n: "matched" for n in e.node_ids}
    if isinstance(e, ev.NodesTouched):
        return {n: "touched" for n in e.node_ids}
    if isinstance(e, ev.LeafSetChanged):
        return {n: "named" for n in (*e.added, *e.removed)}
    if isinstance(e, ev.CacheReset):
        return {0: "named"}  # the root, all that is left
    return {}


def step_roles(events: Iterable[ev.Event], present: Iterable[int] = ()) -> dict[int, str]:
    """Roles of a whole step; a node touched twice keeps its strongest role (new over split
    over evicted over lock over matched). With `present`, only those nodes (the root never).
    Access times and leaf-set changes (QUIET) are left out: every step writes them on its
    path, and the step's narration (viz/words.py step_lines) leaves them out too.

    insert [1, 2, 4] after [1, 2, 3]: node 1 splits (prefix 2), leaf 3 grows, HitCounted
    names 2 and 3: {1: "split", 2: "split", 3: "new"}.
    """
    roles: dict[int, str] = {}
    for e in events:
        if isinstance(e, QUIET):
            continue
        for nid, role in role_of(e).items():
            if RANK[role] < RANK.get(roles.get(nid, ""), 9):
                roles[nid] = role
    keep = set(present)
    return {i: r for i, r in roles.items() if i != 0 and (not keep or i in keep)}


def step_highlight(events: list[Any], snapshot: Any) -> dict[int, str]:
    """Node id -> role for what one step did, over the nodes still in `snapshot`.

    insert [1, 2, 3], then insert [1, 2, 4]: node 1 splits into prefix 2 + node 1, leaf 3
    grows, the insert's hit count touches 2 and 3: {1: "split", 2: "split", 3: "new"}.
    """
    return step_roles(events, (n.id for n in snapshot.nodes))

