"""Pictures of a watched cluster: each worker's blocks, its prefix tree, overlaps and rates.

Reads `WorkerView`s (scenarios/watch.py: plain copies of what a watcher rebuilt from KV
events) and never touches a socket. The block grid (viz/watch_charts.py draws it) is a
`BlockPoolSnapshot` whose cells are the cached blocks in storage order (events carry no block
ids or ref counts, so a cell is "cached" or "unreachable", never "in use" or "free"); the tree is
a scene for viz/component's tree view (viz/scene.py), one node per run of blocks
(radix/watch/view.py `runs`), ids from the run's first hash so a branch splitting a run animates
in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from radix.blocks.snapshot import BlockPoolSnapshot, BlockState
from viz.blocks import short_hash
from viz.fold import fits
from viz.layout import Box, Line, place

Decode = Callable[[list[int]], "str | None"]
WATCH_LABELS = {"cached_free": "cached (stored, not removed)",
                "unreachable": "unreachable (an ancestor was removed)"}
MAX_CHILDREN = 10  # children drawn per tree node; the rest fold into one "+K more" node
MAX_TREE_NODES = 300
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d")


def grid_snapshot(view: Any) -> BlockPoolSnapshot:
    """The view's blocks as a pool snapshot: cell i+1 is the i-th block stored (still cached);
    parent = the cell of the parent block."""
    cell = {b.block_hash: i + 1 for i, b in enumerate(view.blocks)}
    states = tuple(BlockState(
        cell[b.block_hash], "unreachable" if b.block_hash in view.unreachable else "cached_free",
        0, b.block_hash & (2**64 - 1), None, cell.get(b.parent_block_hash), None, ())
        for b in view.blocks)
    n = len(states)
    return BlockPoolSnapshot(states, view.block_size or 16, n + 1, 0, n,
                             len(view.unreachable), view.status.applied)


def grid_caption(view: Any) -> str:
    s = view.status
    state = s.view_state()  # "exact" only once a batch arrived and nothing was lost since
    return (f"{len(view.blocks):,} blocks of {view.block_size or '?'} tokens cached "
            f"({len(view.unreachable):,} unreachable); {s.applied:,} batches applied, next seq "
            f"{'-' if s.next_seq is None else s.next_seq}; {state}; restarts {s.restarts}, "
            f"replayed {s.replayed}, malformed {s.malformed}.")


def _preview(tokens: Sequence[int], decode: Decode | None) -> str:
    text = decode(list(tokens[:24])) if decode is not None else None
    if text is None:
        return "[" + " ".join(str(t) for t in tokens[:5]) + ("…]" if len(tokens) > 5 else "]")
    text = " ".join(text.split())
    return repr(text[:20] + ("…" if len(text) > 20 else ""))


def prefix_tree_scene(view: Any, decode: Decode | None = None,
                      max_children: int = MAX_CHILDREN, max_nodes: int = MAX_TREE_NODES) -> dict:
    """The worker's prefix tree as a laid-out scene: root, then one node per run (its block
    count on the node, its token count and a preview on the edge); orphan runs (parent removed)
    dashed red; past `max_children` per node or `max_nodes` in all, children fold into
    "+K more"."""
    blocks = {b.block_hash: b for b in view.blocks}
    kids: dict[int | None, list[Any]] = {}
    for run in view.runs:
        kids.setdefault(run.parent, []).append(run)
    boxes = [Box("n0", "root", "#ffffff", "#555555", 1.0, False, "root", "")]
    lines: list[Line] = []
    drawn, stack = 1, [(None, "n0")]
    while stack:
        parent, name = stack.pop()
        children = kids.get(parent, [])
        room = min(max_children, max(max_nodes - drawn, 0))
        for run in children[:room]:
            rid = f"r{run.id & (2**64 - 1):x}"
            tokens = [t for h in run.block_hashes for t in blocks[h].token_ids]
            fill = "#fbe3e3" if run.orphan else "#e3f4e1"
            boxes.append(Box(rid, f"{len(run.block_hashes)} blk", fill, "#555555", 1.0,
                             run.orphan, f"hash {short_hash(run.id)}", ""))
            label = f"{len(tokens):,} tok\n{_preview(tokens, decode)}"
            lines.append(Line("e" + rid, name, rid, label, "#777777", 1.2))
            drawn += 1
            stack.append((run.id, rid))
        hidden = len(children) - room
        if hidden > 0:
            mid = f"m{name}"
            boxes.append(Box(mid, f"+{hidden} more", "#ffffff", "#555555", 1.0, True, "", ""))
            lines.append(Line("e" + mid, name, mid, "", "#777777", 1.2))
            drawn += 1
    return place(boxes, lines)


# presenter mode's folds, tried in turn: (children per node, nodes in all)
FIT_CAPS = ((MAX_CHILDREN, MAX_TREE_NODES), (8, 40), (4, 20), (2, 10), (1, 6), (1, 4), (1, 2))


def fit_prefix_tree_scene(view: Any, decode: Decode | None, width_px: float, height_px: float,
                          min_font_px: float) -> dict:
    """`prefix_tree_scene` folded just enough that a `width_px` x `height_px` tree view shows all
    of it with every label >= `min_font_px` (presenter mode; viz/fold.py's `fits`): the caps
    of FIT_CAPS in turn; when none fits, the most folded (the view then pans)."""
    for max_children, max_nodes in FIT_CAPS:
        scene = prefix_tree_scene(view, decode, max_children, max_nodes)
        if fits(scene, width_px, height_px, min_font_px):
            break
    return scene


RECENT_BINS = 5  # the table's rates: the mean of the last 5 one-second bins


def recent(rates: Sequence[Any], field: str, bins: int = RECENT_BINS) -> float:
    """Blocks per second over the last `bins` bins. The last bin alone is the second now
    under way, which reads 0 between a server's bursts of events (#24).

    Bins stored 0, 12, 0, 8, 0 (1 s each) -> (0 + 12 + 0 + 8 + 0) / 5 = 4.0.
    """
    last = list(rates)[-bins:]
    return sum(getattr(b, field) for b in last) / len(last) if last else 0.0


def status_rows(views: Sequence[Any]) -> list[dict[str, Any]]:
    """One table row per worker."""
    return [{"worker": v.name, "rank": v.status.rank, "blocks": len(v.blocks),
             f"stored/s ({RECENT_BINS} s)": recent(v.rates, "stored_per_s"),
             f"removed/s ({RECENT_BINS} s)": recent(v.rates, "removed_per_s"),
             "next seq": v.status.next_seq,
             "view": v.status.view_state(),
             "lost seqs": v.status.lost, "restarts": v.status.restarts,
             "malformed": v.status.malformed} for v in views]


__all__ = ["fit_prefix_tree_scene", "grid_caption", "grid_snapshot", "prefix_tree_scene",
           "status_rows"]
