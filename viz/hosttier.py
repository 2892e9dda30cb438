"""Pictures and words for the host tier walk (scenarios/hosttier.py): the tree with each node
coloured by where its KV lives, as a scene for the animated tree view (viz/component: a
demotion's copy slides down to the host, a load back's rises to the device, the box's colour
fades to its new tier), one sentence per tier event, and each frame's words for the slides
export (`export_frame`). Follows SGLang 0.5.23's HiCache vocabulary (backup, demote, load
back). Reads a walk only.
"""

from __future__ import annotations

from typing import Any

from radix import events as ev
from viz.layout import Box, Line, place

TIER_COLOURS = {"device": "#1f77b4", "both": "#2ca02c", "host": "#ff7f0e", "root": "#eeeeee"}
TIER_WORDS = {"device": "device only", "both": "device + host copy", "host": "host only"}
MOVED_COLOUR = "#d62728"  # the outline of the nodes a frame's event moved
TIER_LEGEND = ("Blue: on the device only; green: on the device with a host copy; orange: on "
               "the host only (demoted). Red outline: the node(s) the move touched.")
# a tier event -> the tree view's move (viz/component: "demote" / "backup" go down to the
# host, "load" / "restore" come up to the device) and the colour of the KV that travels
MOVES = {ev.NodeDemoted: ("demote", "host"), ev.KVBackedUp: ("backup", "host"),
         ev.KVLoadedBack: ("load", "device"), ev.DeviceRestored: ("restore", "device")}
MAX_TOKENS_SHOWN = 8


def tier_box(n: Any, moved: bool) -> Box:
    """One node's box: "#id: tokens" over its tier in words, filled by tier, outlined in red
    when the frame's event moved it (role "moved")."""
    if n.parent is None:
        return Box(f"n{n.id}", "root", TIER_COLOURS["root"], "#555555", 1.0, False, "root", "")
    shown = " ".join(map(str, n.tokens[:MAX_TOKENS_SHOWN]))
    shown += " …" if len(n.tokens) > MAX_TOKENS_SHOWN else ""
    stroke, width = (MOVED_COLOUR, 3.0) if moved else ("#555555", 1.0)
    return Box(f"n{n.id}", f"#{n.id}: {shown}\n{TIER_WORDS[n.tier]}", TIER_COLOURS[n.tier],
               stroke, width, False, f"node #{n.id}: {len(n.tokens)} tokens, "
               f"{TIER_WORDS[n.tier]}", "moved" if moved else "")


def tier_scene(nodes: list[Any], moved: tuple[int, ...] = (), event: ev.Event | None = None
               ) -> dict[str, Any]:
    """The laid-out scene (viz/scene.py) of a walk's tree, top-down; each node dict also
    carries `text` (label colour: white on blue and orange), and the nodes in `moved` carry
    `move` / `move_fill` when `event` is a tier move (MOVES), which the browser animates.

    >>> from types import SimpleNamespace as N
    >>> root, leaf = N(id=0, parent=None), N(id=1, parent=0, tokens=(1, 2), tier="host")
    >>> s = tier_scene([root, leaf], (1,), ev.NodeDemoted(1, 2, (5, 6)))
    >>> leaf = s["nodes"][1]; leaf["label"], leaf["fill"], leaf["stroke"], leaf["move"]
    ('#1: 1 2\\nhost only', '#ff7f0e', '#d62728', 'demote')
    """
    boxes = [tier_box(n, n.id in moved) for n in nodes]
    lines = [Line(f"e{n.id}", f"n{n.parent}", f"n{n.id}", "", "#777777", 1.2)
             for n in nodes if n.parent is not None]
    scene = place(boxes, lines, "TB")
    move, travels = MOVES.get(type(event), ("", ""))
    tiers = {f"n{n.id}": getattr(n, "tier", "root") for n in nodes}
    for d in scene["nodes"]:
        d["text"] = "#222222" if tiers[d["id"]] in ("both", "root") else "#ffffff"
        if move and d["role"] == "moved":
            d["move"], d["move_fill"] = move, TIER_COLOURS[travels]
    return scene


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


def last_of_request(frames: list[Any], i: int) -> bool:
    """Whether frame `i` is the last of its request's frames (its request is then served)."""
    return i + 1 == len(frames) or frames[i + 1].request != frames[i].request


def export_frame(frames: list[Any], steps: list[Any], i: int) -> tuple[dict[str, Any], str]:
    """Frame `i` for the slides export (viz/export.py): its tier-coloured scene, with the
    move the browser plays, and its words (`frame_caption`)."""
    f = frames[i]
    return tier_scene(f.nodes, f.moved, f.event), frame_caption(frames, steps, i)


def frame_caption(frames: list[Any], steps: list[Any], i: int) -> str:
    """Frame `i`'s words for the slides export: the page's sentence (`frame_line`) and, on a
    request's last frame, how it was served.

    Frame 3 of the walk (chat B's first and only demotion; chat B has more frames): "chat B:
    node #1 demoted: its 6 device slots freed, its host copy kept"."""
    words = frame_line(frames[i], steps)
    if frames[i].request >= 0 and last_of_request(frames, i):
        words = f"{words.rstrip('.')}. Served: {served_line(steps[frames[i].request])}."
    return words
