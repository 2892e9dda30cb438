"""The eviction lab's pictures and words: frames of the `evict` call, each sentence true of its
frame, and the policies side by side.

400 conversation leaves are too many to draw on a projector: the picture keeps S, the RAG leaf
and at most `MAX_DRAWN` conversations (the ones the call pops first, then a mix of finished and
live ones) and folds the rest into one summary node `+N more` counted from the full snapshot.
The drawn set is chosen once per run, so node ids stay put and each pop animates in place.
Presenter mode draws top-down and folds further through viz/scene.py's fit_tree_scene (the
drawn set ranked first, in its order) until every label keeps 14 px.
Every sentence is built from the state it describes (S's lock_ref and children, what is still
protected, whether anything runs), and tests/viz/test_viz_eviction.py sweeps the settings to hold
each one to its frame. Reads a `scenarios.eviction.EvictionRun` (duck-typed: viz never imports
scenarios). Leaves out: clicks on the summary node.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix import events as ev
from viz.scene import fit_tree_scene, tree_scene
from viz.timeline import Timeline

MAX_DRAWN = 8  # conversation leaves drawn one by one; the rest fold into the summary node


class LabFrame(NamedTuple):
    k: int  # frame index: 0 before the call, then one per micro-event, then the tree after
    num_frames: int
    scene: dict[str, Any]  # the collapsed picture
    line: str  # one sentence, true of `snapshot`
    freed: int  # tokens freed so far in this call
    evictable: int  # tokens evictable in the full tree at this frame
    protected: int
    snapshot: Any  # the full tree at this frame


def drawn_conversations(run: Any) -> list[int]:
    """Node ids drawn one by one: popped ones first (pop order), then finished and live ones
    alternating from the oldest, up to MAX_DRAWN.

    All 400 live, nothing popped: conv-000..conv-007 (ids 3..10).
    """
    convs = set(run.conv_ids)
    popped = [i for i, _, _ in run.evicted if i in convs]
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


def collapsed_scene(run: Any, snapshot: Any, highlight: dict[int, str], drawn: list[int],
                    fit: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """The scene of `snapshot` with the undrawn conversation leaves folded into S's summary
    node (`m<S id>`, counted from the full snapshot); S and RAG are named on their boxes.
    `fit` (presenter mode: view width and height, smallest label, in px): folded further by
    viz/scene.py's fit_tree_scene until every label keeps that size; S, RAG and the
    highlighted leaf stay, the other conversations are dropped from the end of `drawn`.

    All 400 live: 8 drawn, the summary says '+392 more' and '392 locked'.
    """
    conv = set(run.conv_ids)
    fixed = [n.id for n in snapshot.nodes if n.id not in conv]
    firsts = {n.token_ids[0]: run.names[n.id] for n in snapshot.nodes
              if n.token_ids and n.id in run.names}
    present = {n.id for n in snapshot.nodes}
    names = {i: name for i, name in run.names.items()
             if i in present and not name.startswith("conv-")}
    # LR: the many siblings under S stack down the screen instead of shrinking the picture
    items = {"highlight": highlight, "rankdir": "TB" if fit else "LR", "names": names,
             "decode": lambda ids: firsts.get(ids[0], "…")}
    if fit is None:
        return tree_scene(snapshot, max_children=len(drawn) or 1, keep=fixed + list(drawn),
                          **items)
    parents = {n.parent for n in snapshot.nodes if n.id in conv}
    beside = max((sum(1 for n in snapshot.nodes if n.parent == p and n.id not in conv)
                  for p in parents), default=0)  # RAG beside the conversations under S
    # keep_locked off: 384 live conversations are locked; the summary counts them (the lesson)
    return fit_tree_scene(snapshot, *fit, max_children=len(drawn) + beside or 1, keep=fixed,
                          prefer=drawn, keep_locked=False, **items)


def describe(evicted: list[tuple[int, str, int]]) -> str:
    """Pop order in words; runs of conversations fold: 'conv-399 … conv-387 (13 x 24)'.

    >>> describe([(1, "RAG context", 2112)])
    'RAG context (2,112)'
    >>> describe([(5, "conv-002", 24), (4, "conv-001", 24), (1, "RAG context", 2112)])
    'conv-002 … conv-001 (2 x 24), then RAG context (2,112)'
    """
    parts: list[list[tuple[int, str, int]]] = []
    for item in evicted:
        if parts and item[1].startswith("conv-") and parts[-1][-1][1].startswith("conv-"):
            parts[-1].append(item)
        else:
            parts.append([item])
    words = []
    for run in parts:
        if len(run) == 1:
            words.append(f"{run[0][1]} ({run[0][2]:,})")
        else:
            words.append(f"{run[0][1]} … {run[-1][1]} ({len(run)} x {run[0][2]:,})")
    return ", then ".join(words) if words else "nothing"


def system_state(run: Any, snapshot: Any) -> str:
    """Why S is (or is not) a candidate, from the snapshot: its lock_ref and its children."""
    s = snapshot.by_id().get(run.system_id)
    name = run.names[run.system_id]
    if s is None:
        return f"{name} is gone"
    kids = len(s.child_ids)
    if s.lock_ref > 0:
        return (f"{name} (r={s.lock_ref}: {s.lock_ref:,} live conversation(s) below it) is "
                "locked")
    if kids:
        return (f"{name} (r=0, but {kids:,} cached child(ren) below it) is not a leaf: only "
                "leaves are evictable")
    return f"{name} (r=0, no children) is an evictable leaf"


def first_line(run: Any, snapshot: Any) -> str:
    n = len(run.candidates)
    first = run.candidates[0].name if run.candidates else "nothing"
    return (f"evict({run.to_free:,}) under {run.policy}: {n:,} evictable "
            f"{'leaf' if n == 1 else 'leaves'}; {system_state(run, snapshot)}. "
            f"First in policy order: {first}.")


# why each policy pops the leaf it pops, in plain words (radix/tree/evict_policy.py's sort keys:
# the smallest key goes first, so a negated time means newest first)
REASONS = {
    "lru": "least recently used first (the oldest last access)",
    "mru": "most recently used first (the newest last access: its sort key is minus that time)",
    "fifo": "first created, first out (the oldest creation time)",
    "filo": "last created, first out (the newest creation time: minus that time)",
    "lfu": "fewest hits first; among equal hits, the oldest last access",
    "priority": "lowest priority first; among equal priorities, the oldest last access",
    "slru": "leaves hit fewer times than the threshold (probation) first; then the oldest "
            "last access",
}


def event_line(run: Any, e: ev.Event, freed: int) -> str:
    name = run.names
    if isinstance(e, ev.NodeEvicted):
        return (f"pops {name.get(e.node_id, e.node_id)} (#{e.node_id}, {e.num_tokens:,} tokens, "
                f"sort key {e.sort_key}): {freed:,} of {run.to_free:,} freed")
    if isinstance(e, ev.LeafSetChanged) and e.removed:
        nid = e.removed[0]
        why = REASONS.get(run.policy, "the smallest sort key left")
        return f"{run.policy} picks {name.get(nid, nid)} (#{nid}): {why}"
    if isinstance(e, ev.LeafSetChanged) and e.added:
        nid = e.added[0]
        return (f"cascade: {name.get(nid, nid)} (#{nid}) lost its last child and has r=0: it "
                "becomes an evictable leaf in this same call")
    return type(e).__name__


def end_line(run: Any, after: Any) -> str:
    """The last frame's line. A call that freed less than asked says why, from the tree after
    it: what is left is locked (protected > 0), or nothing is left at all.

    All 400 live, evict(5,000): only the 2,112-token RAG leaf is evictable, so 2,888 short and
    the rest (10,112 tokens) is locked by live requests.
    """
    s = run.names[run.system_id]
    s_state = "was evicted" if any(i == run.system_id for i, _, _ in run.evicted) else "stays"
    short = run.to_free - run.num_evicted
    if short > 0:
        why = (f"the other {after.protected_size:,} cached tokens are locked by live requests"
               if after.protected_size else "the tree is empty now: nothing is left to evict")
        return (f"done: only {run.num_evicted:,} tokens freed for {run.to_free:,} asked, "
                f"{short:,} short: {why}. {s} {s_state}.")
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


def num_frames(run: Any) -> int:
    """Frame 0 (before), one per micro-event of the evict step, and the tree after the call."""
    return len(run.log.micro_events(run.evict_step)) + 2


def _freed(events: list[ev.Event]) -> int:
    return sum(e.num_tokens for e in events if isinstance(e, ev.NodeEvicted))


def lab_frame(run: Any, timeline: Timeline, k: int,
              fit: tuple[float, float, float] | None = None) -> LabFrame:
    """Frame k, 0 <= k < num_frames(run): the last one is the tree after the call; `fit`:
    presenter mode's view size and smallest label (collapsed_scene)."""
    micro = run.log.micro_events(run.evict_step)
    k = max(0, min(k, len(micro) + 1))
    freed = _freed(micro[:k])
    if k == len(micro) + 1:
        snap, highlight = timeline.frame(run.evict_step + 1, 0).snapshot, {}
        line = end_line(run, snap)
    else:
        snap = timeline.frame(run.evict_step, k).snapshot
        highlight = _pick_highlight(micro[k - 1] if k else None)
        line = first_line(run, snap) if k == 0 else event_line(run, micro[k - 1], freed)
    scene = collapsed_scene(run, snap, highlight, drawn_conversations(run), fit)
    evictable = snap.evictable_size
    last = micro[k - 1] if 0 < k <= len(micro) else None
    if isinstance(last, ev.NodeEvicted) and last.node_id in snap.by_id():
        # subtle: the pop's frame still draws the leaf (red, at its last moment) but `freed`
        # counts it: it is no longer evictable, so freed + evictable stays what it was
        evictable -= last.num_tokens
    return LabFrame(k, len(micro) + 2, scene, line, freed, evictable, snap.protected_size, snap)


def block_short_line(blk: Any) -> str | None:
    """Says why vLLM cannot admit the new request when the free queue is shorter than asked,
    and what it would do (preempt only when something runs)."""
    if blk.num_needed >= blk.num_wanted:
        return None
    then = ("the scheduler would preempt a running request to make room"
            if blk.num_running else "nothing runs to preempt: the pool is too small for it")
    return (f"Only {blk.num_needed:,} blocks are free, {blk.num_wanted:,} wanted: vLLM cannot "
            f"admit the request ({then}).")
