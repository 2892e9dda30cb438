"""Frames of the eviction lab's `evict` step: a collapsed tree picture and one line per event.

400 conversation leaves are too many to draw on a projector: the picture keeps S, the RAG leaf
and at most `MAX_DRAWN` conversations (the ones the call pops first, then a mix of finished and
live ones) and folds the rest into one summary node (viz/dot.py's `max_children` fold), `+N
more`, whose counts come from the full snapshot. The drawn set is chosen once per run, so node
ids stay put and each pop animates in place. Leaves out: clicks on the summary node.
"""

from __future__ import annotations

from typing import NamedTuple

from radix import events as ev
from viz.dot import tree_to_dot
from viz.eviction_lab import EvictionRun
from viz.timeline import Timeline

MAX_DRAWN = 8  # conversation leaves drawn one by one; the rest fold into the summary node


class LabFrame(NamedTuple):
    k: int  # frame index: 0 before the call, then one per micro-event, then the tree after
    num_frames: int
    dot: str  # the collapsed picture
    line: str  # one-line narration
    freed: int  # tokens freed so far in this call
    evictable: int  # tokens evictable in the full tree at this frame
    protected: int


def drawn_conversations(run: EvictionRun) -> list[int]:
    """Node ids drawn one by one: popped ones first (pop order), then finished and live ones
    alternating from the oldest, up to MAX_DRAWN.

    All 400 live, nothing popped: conv-000..conv-007 (ids 3..10).
    """
    popped = [i for i, _, _ in run.evicted if i in set(run.conv_ids)]
    cand = {c.node_id for c in run.candidates}
    finished = [i for i in run.conv_ids if i in cand and i not in popped]
    live = [i for i in run.conv_ids if i not in cand]
    mixed = [x for pair in zip(finished, live) for x in pair]
    rest = finished[len(live):] + live[len(finished):]
    out: list[int] = []
    for i in popped + mixed + rest:
        if len(out) == MAX_DRAWN:
            break
        if i not in out:
            out.append(i)
    return out


def _decode_names(run: EvictionRun, snapshot) -> dict[int, str]:
    """First token of each edge -> its name, so edge previews read 'RAG context', not ids."""
    return {n.token_ids[0]: run.names[n.id] for n in snapshot.nodes
            if n.token_ids and n.id in run.names}


def collapsed_dot(run: EvictionRun, snapshot, highlight: dict[int, str],
                  drawn: list[int]) -> str:
    """DOT of `snapshot` with the undrawn conversation leaves folded into S's summary node
    (viz/dot.py's fold: `m<S id>`, counted from the full snapshot).

    All 400 live: 8 drawn, the summary says '+392 more' and '392 locked'.
    """
    conv = set(run.conv_ids)
    keep = [n.id for n in snapshot.nodes if n.id not in conv] + list(drawn)
    names = _decode_names(run, snapshot)
    # LR: the many siblings under S stack down the screen instead of shrinking the picture
    return tree_to_dot(snapshot, highlight=highlight, rankdir="LR", max_children=len(drawn) or 1,
                       keep=keep, decode=lambda ids: names.get(ids[0], "…"))


def frame_line(run: EvictionRun, k: int, micro: list[ev.Event], freed: int) -> str:
    """The narration after k events of the evict step (see the tests for the exact lines)."""
    name = run.names
    if k == 0:
        first = run.candidates[0].name if run.candidates else "nothing"
        n = len(run.candidates)
        return (f"evict({run.to_free:,}) under {run.policy}: {n:,} evictable "
                f"{'leaf' if n == 1 else 'leaves'}; {name[run.system_id]} (r>0, live children) is "
                f"not one. First in policy order: {first}.")
    e = micro[k - 1]
    if isinstance(e, ev.NodeEvicted):
        return (f"pops {name.get(e.node_id, e.node_id)} (#{e.node_id}, {e.num_tokens:,} tokens, "
                f"sort key {e.sort_key}): {freed:,} of {run.to_free:,} freed")
    if isinstance(e, ev.LeafSetChanged) and e.removed:
        nid = e.removed[0]
        return f"{run.policy} picks {name.get(nid, nid)} (#{nid}): the smallest sort key left"
    if isinstance(e, ev.LeafSetChanged) and e.added:
        nid = e.added[0]
        return (f"cascade: {name.get(nid, nid)} (#{nid}) lost its last child and is unlocked: "
                f"it becomes an evictable leaf in this same call")
    return type(e).__name__


def end_line(run: EvictionRun) -> str:
    """The last frame's line; a call that freed less than asked says so (the rest is locked).

    All 400 live, evict(5,000): only the 2,112-token RAG leaf is evictable, so 2,888 short.
    """
    s = run.names[run.system_id]
    s_state = "was evicted" if any(i == run.system_id for i, _, _ in run.evicted) else "stays"
    short = run.to_free - run.num_evicted
    if short > 0:
        return (f"done: only {run.num_evicted:,} tokens freed for {run.to_free:,} asked, "
                f"{short:,} short: everything else is locked by live requests. {s} {s_state}.")
    return (f"done: {run.num_evicted:,} tokens freed for {run.to_free:,} asked; overshoot "
            f"{run.overshoot:,} (whole leaves go). {s} {s_state}.")


def _pick_highlight(e: ev.Event | None) -> dict[int, str]:
    if isinstance(e, ev.LeafSetChanged) and e.removed:
        return {e.removed[0]: "evicted"}  # picked: about to pop
    if isinstance(e, ev.NodeEvicted):
        return {e.node_id: "evicted"}
    if isinstance(e, ev.LeafSetChanged) and e.added:
        return {e.added[0]: "new"}  # a parent joins the candidates (cascade)
    return {}


def num_frames(run: EvictionRun) -> int:
    """Frame 0 (before), one per micro-event of the evict step, and the tree after the call."""
    return len(run.log.micro_events(run.evict_step)) + 2


def lab_frame(run: EvictionRun, timeline: Timeline, k: int) -> LabFrame:
    """Frame k, 0 <= k < num_frames(run): the last one is the tree after the call."""
    micro = run.log.micro_events(run.evict_step)
    k = max(0, min(k, len(micro) + 1))
    if k == len(micro) + 1:
        snap, line, highlight = timeline.frame(run.evict_step + 1, 0).snapshot, end_line(run), {}
    else:
        snap = timeline.frame(run.evict_step, k).snapshot
        highlight = _pick_highlight(micro[k - 1] if k else None)
        line = frame_line(run, k, micro, _freed(micro[:k]))
    dot = collapsed_dot(run, snap, highlight, drawn_conversations(run))
    return LabFrame(k, len(micro) + 2, dot, line, _freed(micro[:k]), snap.evictable_size,
                    snap.protected_size)


def _freed(events: list[ev.Event]) -> int:
    return sum(e.num_tokens for e in events if isinstance(e, ev.NodeEvicted))
