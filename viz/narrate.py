"""One line of plain English for every micro-event of a radix cache, for the timeline.

Follows the words of SGLang's RadixCache (split, leaf, lock_ref, evictable). A narrator needs the
tree just before the event (a `TreeModel`, for edge lengths and depths) and who owns each node
(`owners`: node id -> the request whose insert created it), so a split reads
"R2 leaves R1 at token 2,055: the node splits into 2,055 + 96".
Leaves out: block-cache events (the block view has its own captions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from radix import events as ev
from radix.tree.replay import TreeModel


def build_owners(steps: Iterable[list[ev.Event]]) -> dict[int, str]:
    """Node id -> rid of the step that inserted it; a split's new prefix node keeps the owner.

    >>> s = [[ev.StepStarted(0, "insert", "R1"), ev.NodeInserted(1, 0, (7,), (1,), 0, 0.0)]]
    >>> build_owners(s)
    {1: 'R1'}
    """
    owners: dict[int, str] = {}
    for events in steps:
        rid = None
        for e in events:
            if isinstance(e, ev.StepStarted) and rid is None:
                rid = e.rid
            elif isinstance(e, ev.NodeInserted) and rid:
                owners[e.node_id] = rid
            elif isinstance(e, ev.NodeSplit) and e.node_id in owners:
                owners[e.new_node_id] = owners[e.node_id]
    return owners


def depth_tokens(model: TreeModel, node_id: int) -> int:
    """Tokens on the path from the root down to the end of `node_id`'s edge."""
    total = 0
    while node_id in model.nodes and node_id != 0:
        rec = model.nodes[node_id]
        total += len(rec.token_ids)
        node_id = rec.parent
    return total


def _who(rid: str | None) -> str:
    return rid or "a call"


def narrate(e: ev.Event, before: TreeModel, owners: Mapping[int, str], rid: str | None) -> str:
    """The line for event `e`, given the tree `before` it and the rid of its step."""
    if isinstance(e, ev.StepStarted):
        detail = f" ({e.detail})" if e.detail else ""
        who = f"{e.rid} calls " if e.rid else ""
        return f"step {e.step}: {who}{e.op}{detail}"
    if isinstance(e, ev.NodeSplit):
        old = before.nodes[e.node_id]
        at = depth_tokens(before, e.parent_id) + e.split_len
        owner = owners.get(e.node_id)
        whose = f"leaves {owner}" if owner and owner != rid else "leaves the cached path"
        rest = len(old.token_ids) - e.split_len
        return (f"{_who(rid)} {whose} at token {at:,}: node #{e.node_id} splits into "
                f"{e.split_len:,} + {rest:,} (new prefix #{e.new_node_id})")
    if isinstance(e, ev.NodeInserted):
        return (f"{_who(rid)} grows a new leaf #{e.node_id} of {len(e.token_ids):,} tokens "
                f"under #{e.parent_id}")
    if isinstance(e, ev.PrefixMatched):
        return (f"{_who(rid)} matches {e.prefix_len:,} of {e.key_len:,} tokens "
                f"over {len(e.node_ids)} node(s)")
    if isinstance(e, ev.LockChanged):
        verb = "locks" if e.delta > 0 else "unlocks"
        moved = ""
        if e.size_moved:
            src, dst = ("evictable", "protected") if e.delta > 0 else ("protected", "evictable")
            moved = f"; {e.size_moved:,} tokens move {src} -> {dst}"
        return f"{_who(rid)} {verb} #{e.node_id}: r={e.lock_ref}{moved}"
    if isinstance(e, ev.LeafSetChanged):
        parts = [f"+#{n}" for n in e.added] + [f"-#{n}" for n in e.removed]
        return "evictable leaves: " + " ".join(parts)
    if isinstance(e, ev.NodeEvicted):
        return (f"evict pops leaf #{e.node_id} ({e.num_tokens:,} tokens) by policy order, "
                f"sort key {e.sort_key}")
    if isinstance(e, ev.NodesTouched):
        return f"last access time {e.time:g} on {len(e.node_ids)} node(s)"
    if isinstance(e, ev.HitCounted):
        what = "hit_count +1" if e.counted else "priority only (chunked)"
        return f"{what} on {len(e.node_ids)} node(s)"
    if isinstance(e, ev.CacheReset):
        return "reset: the tree is empty again"
    if isinstance(e, ev.StepEnded):
        return f"step {e.step} ends"
    return type(e).__name__
