"""Rebuilding a radix tree from its events alone (the replay law).

`TreeModel` is a plain record of a tree that changes only by `apply(event)`. Fed the events of a
run from an empty cache, it ends equal to the cache's own `snapshot()`: tests/test_events.py
checks this after every step of random runs. The event log (radix/tree/eventlog.py) uses it to
rebuild any step from a keyframe.
Leaves out: block-cache events (radix/blocks/snapshot.py is the block pool's own view).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from radix import events as ev
from radix.tokens import frozen
from radix.tree.inspect import child_sort_key
from radix.tree.node import ROOT_PRIORITY, NodeState, TreeSnapshot, count_hits


@dataclass
class NodeRecord:
    parent: int | None
    token_ids: Sequence[int]  # as the event carried them (a tuple, or a compact sequence);
    slot_ids: Sequence[int]  # never mutated in place: a split slices them anew
    lock_ref: int = 0
    hit_count: int = 0
    last_access_time: float = 0.0
    creation_time: float = 0.0
    priority: int = 0
    evictable_leaf: bool = False
    extra_key: str | None = None
    cache_salt: str | None = None
    child_ids: list[int] = field(default_factory=list)


def _copy_record(r: NodeRecord) -> NodeRecord:
    """A copy of r sharing its (never mutated) sequences, with its own child list: an event
    log's keyframe copies every node, so this is dataclasses.replace without its per-field
    work."""
    out = object.__new__(NodeRecord)
    out.__dict__.update(r.__dict__)
    out.child_ids = list(r.child_ids)
    return out


class TreeModel:
    """A tree rebuilt from events.

    >>> from radix.events import ListSink
    >>> from radix.tree.radix_cache import RadixCache
    >>> sink = ListSink(); c = RadixCache(sink=sink)
    >>> _ = c.insert([1, 2, 3]); _ = c.match_prefix([1, 2, 9])
    >>> m = TreeModel(); m.apply_all(sink.events); m.snapshot() == c.snapshot()
    True
    """

    # event type -> handler(model, event): _HANDLERS below; EventLog.emit calls them directly
    handlers: dict[type, Callable[[TreeModel, ev.Event], None]]

    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size
        self.reset()

    def reset(self) -> None:
        self.nodes: dict[int, NodeRecord] = {
            0: NodeRecord(None, [], [], lock_ref=1, priority=ROOT_PRIORITY)
        }
        self.step = 0

    def copy(self) -> TreeModel:
        out = TreeModel.__new__(TreeModel)
        out.page_size, out.step = self.page_size, self.step
        out.nodes = {i: _copy_record(r) for i, r in self.nodes.items()}
        return out

    def apply_all(self, events: Iterable[ev.Event]) -> None:
        for e in events:
            self.apply(e)

    def apply(self, e: ev.Event) -> None:
        handler = self.handlers.get(type(e))
        if handler is not None:
            handler(self, e)

    def snapshot(self) -> TreeSnapshot:
        nodes, ps = self.nodes, self.page_size
        out: list[NodeState] = []
        evictable = protected = 0
        stack = [0]
        while stack:
            nid = stack.pop()
            r = nodes[nid]
            out.append(_state(nid, r))
            if nid:
                if r.lock_ref:
                    protected += len(r.token_ids)
                else:
                    evictable += len(r.token_ids)
            kids = sorted(
                r.child_ids,
                key=lambda c: child_sort_key(
                    tuple(nodes[c].token_ids[:ps]), nodes[c].extra_key, nodes[c].cache_salt, ps
                ),
                reverse=True,
            )
            stack.extend(kids)
        return TreeSnapshot(tuple(out), ps, evictable, protected, self.step)


def _state(nid: int, r: NodeRecord) -> NodeState:
    return NodeState(
        nid, r.parent, frozen(r.token_ids), frozen(r.slot_ids), r.lock_ref, r.hit_count,
        r.last_access_time, r.creation_time, r.priority, r.evictable_leaf, r.extra_key,
        r.cache_salt, tuple(r.child_ids),
    )


def _touched(m: TreeModel, e: ev.NodesTouched) -> None:
    for nid in e.node_ids:
        m.nodes[nid].last_access_time = e.time


def _split(m: TreeModel, e: ev.NodeSplit) -> None:
    child, s = m.nodes[e.node_id], e.split_len
    new = NodeRecord(
        e.parent_id, child.token_ids[:s], child.slot_ids[:s], child.lock_ref, child.hit_count,
        e.time, e.time if e.creation_time is None else e.creation_time, child.priority, False,
        child.extra_key, child.cache_salt, [e.node_id],
    )
    child.token_ids, child.slot_ids = child.token_ids[s:], child.slot_ids[s:]
    child.parent = e.new_node_id
    siblings = m.nodes[e.parent_id].child_ids
    siblings[siblings.index(e.node_id)] = e.new_node_id
    m.nodes[e.new_node_id] = new


def _inserted(m: TreeModel, e: ev.NodeInserted) -> None:
    m.nodes[e.node_id] = NodeRecord(
        e.parent_id, e.token_ids, e.slot_ids, 0, 0, e.time, e.time, e.priority, False,
        e.extra_key, e.cache_salt,
    )
    m.nodes[e.parent_id].child_ids.append(e.node_id)


def _hits(m: TreeModel, e: ev.HitCounted) -> None:
    nodes = m.nodes
    path = [nodes[nid] for nid in e.node_ids]
    count_hits(nodes[0], path, e.priority, e.first_counted if e.counted else len(path))


def _lock(m: TreeModel, e: ev.LockChanged) -> None:
    m.nodes[e.node_id].lock_ref = e.lock_ref


def _leaves(m: TreeModel, e: ev.LeafSetChanged) -> None:
    for nid in e.added:
        m.nodes[nid].evictable_leaf = True
    for nid in e.removed:
        if nid in m.nodes:
            m.nodes[nid].evictable_leaf = False


def _evicted(m: TreeModel, e: ev.NodeEvicted) -> None:
    m.nodes[e.parent_id].child_ids.remove(e.node_id)
    del m.nodes[e.node_id]


def _step_ended(m: TreeModel, e: ev.StepEnded) -> None:
    m.step = e.step + 1


_HANDLERS = {
    ev.CacheReset: lambda m, e: m.reset(),
    ev.NodesTouched: _touched,
    ev.NodeSplit: _split,
    ev.NodeInserted: _inserted,
    ev.HitCounted: _hits,
    ev.LockChanged: _lock,
    ev.LeafSetChanged: _leaves,
    ev.NodeEvicted: _evicted,
    ev.StepEnded: _step_ended,
}
TreeModel.handlers = _HANDLERS
