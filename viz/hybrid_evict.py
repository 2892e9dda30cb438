"""Words and highlights for the Eviction lab's component question (scenarios/hybrid_evict.py):
each frame of an `evict` call on SGLang's component tree said with its rule and numbers (an
inner node tombstoned, the cascade SWA -> MAMBA, a leaf deleted whole), the tree before it,
and the totals. Reads the lab's run (frames of ComponentNodeState and the evict's events).
Leaves out: the tree's picture (viz/hybrid.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from radix import events as ev
from viz.hybrid import spans

UNITS = {"full": "full tokens", "swa": "SWA tokens", "mamba": "Mamba states"}
NAMES = {"full": "FULL", "swa": "SWA", "mamba": "MAMBA"}


def _node(nid: int, nodes: Sequence[Any], names: Mapping[int, str]) -> str:
    at = spans(nodes).get(nid)
    where = f", {at[0]:,}..{at[1]:,}" if at else ""
    return f"node #{nid} ({names.get(nid, 'a request')}{where})"


def event_line(e: ev.Event, before: Sequence[Any], names: Mapping[int, str]) -> str:
    """One evict event in words, with its rule; `before`: the tree just before it.

    >>> from types import SimpleNamespace as N
    >>> t = [N(id=0, parent=None, token_ids=()), N(id=2, parent=0, token_ids=(1,) * 8)]
    >>> print(event_line(ev.ComponentTombstoned(2, "mamba", 1, "cascade"), t, {2: "chat A"}))
    The cascade takes the Mamba state of node #2 (chat A, 0..8): a state is no use where the \
window before it is gone (SWA's priority 1 is above MAMBA's 0).
    """
    node = _node(e.node_id, before, names) if hasattr(e, "node_id") else ""
    if isinstance(e, ev.NodeEvicted):
        return (f"{node} is an evictable leaf: it goes whole, {e.num_tokens:,} FULL tokens "
                "with its SWA slots and its Mamba state.")
    if isinstance(e, ev.ComponentTombstoned) and e.cause == "cascade":
        return (f"The cascade takes the Mamba state of {node}: a state is no use where the "
                "window before it is gone (SWA's priority 1 is above MAMBA's 0).")
    if isinstance(e, ev.ComponentTombstoned) and e.component == "swa":
        return (f"SWA's LRU tail is {node}, inside the tree: its {e.num_slots:,} SWA tokens are "
                "tombstoned; the node and its FULL slots stay.")
    if isinstance(e, ev.ComponentTombstoned):
        return (f"MAMBA's LRU tail is {node}, inside the tree: its state is tombstoned; its SWA "
                "window and FULL slots stay (a tombstone cascades only to lower priorities).")
    return type(e).__name__


def before_line(run: Any) -> str:
    """The tree before the call and what is asked."""
    ask = f"evict {run.amount:,} {UNITS[run.ask]}"
    lru = run.lru.get(run.ask)
    locks = {n.id: getattr(n, f"{run.ask}_lock_ref", 0) for n in run.frames[0].nodes}
    order = (f" {NAMES[run.ask]}'s LRU from the tail: "
             + ", ".join(f"#{i}" + (" (locked: passed over)" if locks.get(i) else "")
                         for i in lru) + "." if lru else
             " FULL pops evictable leaves in LRU order.")
    held = (" Chat C is running: its lock holds the system prompt in every component (r=1), "
            "so nothing of it can go." if run.live else " Every request has finished.")
    return f"The next admission asks to {ask}.{order}{held}"


def frame_line(run: Any, k: int) -> str:
    """Frame k's sentence (0: the tree before the call); the last frame adds the totals."""
    if k == 0:
        return before_line(run)
    line = event_line(run.frames[k].event, run.frames[k - 1].nodes, run.names)
    if k == len(run.frames) - 1:
        line += " " + totals_line(run)
    return line


def totals_line(run: Any) -> str:
    """What the call freed, per component."""
    parts = [f"{run.freed.get(c, 0):,} {UNITS[c]}" for c in ("full", "swa", "mamba")]
    parts = [p.removesuffix("s") if p.startswith("1 ") else p for p in parts]
    return f"Freed in all: {', '.join(parts)}."


def frame_roles(run: Any, k: int) -> dict[int, str]:
    """The node frame k's event touched, in viz/hybrid.py's pens: a tombstone made (grey); a
    deleted node is gone from the tree after it, so nothing is outlined."""
    e = run.frames[k].event
    if isinstance(e, ev.ComponentTombstoned):
        return {e.node_id: "tombstoned"}
    return {}
