"""Pictures and words for the host tier walk (scenarios/hosttier.py): the tree with each node
coloured by where its KV lives, and one sentence per tier event. Follows SGLang 0.5.23's
HiCache vocabulary (backup, demote, load back). Reads a walk only.
"""

from __future__ import annotations

from typing import Any

import graphviz

from radix import events as ev

TIER_COLOURS = {"device": "#1f77b4", "both": "#2ca02c", "host": "#ff7f0e", "root": "#eeeeee"}
TIER_WORDS = {"device": "device only", "both": "device + host copy", "host": "host only"}


MOVED_COLOUR = "#d62728"  # the outline of the nodes a Tour frame's event moved


def tier_tree_dot(nodes: list[Any], moved: tuple[int, ...] = ()) -> str:
    """Top-down tree, one box per node labelled with its tokens, filled by tier; the nodes in
    `moved` (the frame's event touched them) get a thick red outline.

    >>> from types import SimpleNamespace as N
    >>> root, leaf = N(id=0, parent=None), N(id=1, parent=0, tokens=(1, 2), tier="host")
    >>> dot = tier_tree_dot([root, leaf], (1,))
    >>> "host only" in dot, "penwidth=4" in dot
    (True, True)
    """
    g = graphviz.Digraph("tiers", graph_attr={"rankdir": "TB", "bgcolor": "transparent"},
                         node_attr={"shape": "box", "style": "filled,rounded",
                                    "fontname": "DejaVu Sans", "fontsize": "14"})
    for n in nodes:
        if n.parent is None:
            g.node(f"n{n.id}", label="root", fillcolor=TIER_COLOURS["root"])
            continue
        label = " ".join(map(str, n.tokens))
        edge = {"color": MOVED_COLOUR, "penwidth": "4"} if n.id in moved else {}
        g.node(f"n{n.id}", label=f"#{n.id}: {label}\n{TIER_WORDS[n.tier]}",
               fillcolor=TIER_COLOURS[n.tier], fontcolor="white" if n.tier != "both" else "black",
               tooltip=f"node #{n.id}: {len(n.tokens)} tokens, {TIER_WORDS[n.tier]}", **edge)
        g.edge(f"n{n.parent}", f"n{n.id}")
    return g.source


def event_line(e: ev.Event) -> str | None:
    """One sentence per event the walk shows; None for events it does not narrate.

    >>> event_line(ev.NodeDemoted(3, 6, (1, 2, 3, 4, 5, 6)))
    'node #3 demoted: its 6 device slots freed, its host copy kept'
    """
    if isinstance(e, ev.KVBackedUp):
        return f"node #{e.node_id} backed up to host: {e.num_tokens:,} tokens ({e.reason})"
    if isinstance(e, ev.NodeDemoted):
        return (f"node #{e.node_id} demoted: its {e.num_tokens:,} device slots freed, its host "
                "copy kept")
    if isinstance(e, ev.KVLoadedBack):
        ids = ", ".join(f"#{i}" for i in e.node_ids)
        return f"loaded back from host: {e.num_tokens:,} tokens onto node(s) {ids}"
    if isinstance(e, ev.DeviceRestored):
        return (f"node #{e.node_id} restored on the device from the request's freshly "
                f"computed {e.num_tokens:,} token(s)")
    if isinstance(e, ev.DeviceLeafDropped):
        return f"node #{e.node_id} dropped, {e.num_tokens:,} tokens lost ({e.reason})"
    if isinstance(e, ev.HostLeafEvicted):
        return f"node #{e.node_id} evicted from host: {e.num_tokens:,} tokens"
    if isinstance(e, ev.NodeSplit):
        return f"node #{e.node_id} split after {e.split_len:,} tokens (new node #{e.new_node_id})"
    if isinstance(e, ev.NodeInserted):
        return f"node #{e.node_id} inserted: {len(e.token_ids):,} tokens on the device"
    return None


def served_line(step: Any) -> str:
    s = step.served
    return (f"{step.title}: {s.device_hit:,} tokens from the device, {s.host_hit:,} loaded "
            f"back from host, {s.miss:,} computed")


def frame_line(frame: Any, steps: list[Any]) -> str:
    """The Tour's sentence for one frame of run_frames() (scenarios/hosttier.py)."""
    if frame.event is None:
        return "The cache is empty: device and host pools free."
    return f"{steps[frame.request].title}: {event_line(frame.event)}"
