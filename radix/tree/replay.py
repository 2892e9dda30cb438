"""Rebuilding a radix tree from its events alone (the replay law).

`TreeModel` is a tree of the cache's own TreeNodes changed only by `apply(event)`, through the
cache's own mutation code: a split is node.split_edge, a new leaf node.attach, an eviction
node.detach, hits node.count_hits; its snapshot is inspect.tree_states (RadixCache.snapshot's
walk). Fed a run's events from an empty cache, it ends equal to the cache's `snapshot()`
(tests/radix/tree/test_events.py, after every step of random runs). The event log (eventlog.py)
rebuilds any step from a keyframe with it; the live page (scenarios/live.py) follows an engine's
tree. Leaves out: the cache's clock, eviction heap, size counters and allocator (the events carry
their results: times, leaf-set changes, lock counts); block-cache events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from radix import events as ev
from radix.tree.inspect import tree_states
from radix.tree.key import RadixKey
from radix.tree.node import (
    ROOT_PRIORITY,
    TreeNode,
    TreeSnapshot,
    attach,
    count_hits,
    detach,
    split_edge,
)

_new = object.__new__


class TreeModel:
    """A tree rebuilt from events: `nodes` (id -> TreeNode, the root 0) and `leaves` (the
    evictable leaves, as the LeafSetChanged events say).

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
        root = TreeNode(0, RadixKey([]), [], 0.0)
        root.lock_ref, root.priority = 1, ROOT_PRIORITY  # as RadixCache.reset
        self.nodes: dict[int, TreeNode] = {0: root}
        self.leaves: set[TreeNode] = set()
        self.step = 0

    def copy(self) -> TreeModel:
        """An independent copy (an event log's keyframe): new nodes, relinked among themselves;
        keys and values are shared (they are never mutated in place: a split slices anew)."""
        out = _new(TreeModel)
        out.page_size, out.step = self.page_size, self.step
        nodes = out.nodes = {i: _copy_node(n) for i, n in self.nodes.items()}
        for n in nodes.values():
            if n.parent is not None:
                n.parent = nodes[n.parent.id]
            # subtle: every node gets its own dict, an empty one too (attach fills it in place)
            n.children = {k: nodes[c.id] for k, c in n.children.items()}
        out.leaves = {nodes[n.id] for n in self.leaves}
        return out

    def apply_all(self, events: Iterable[ev.Event]) -> None:
        for e in events:
            self.apply(e)

    def apply(self, e: ev.Event) -> None:
        handler = self.handlers.get(type(e))
        if handler is not None:
            handler(self, e)

    def snapshot(self) -> TreeSnapshot:
        evictable = protected = 0
        for nid, n in self.nodes.items():
            if nid:
                if n.lock_ref:
                    protected += len(n.key)
                else:
                    evictable += len(n.key)
        ps = self.page_size
        return TreeSnapshot(tree_states(self.nodes[0], self.leaves, ps), ps, evictable,
                            protected, self.step)


def _copy_node(n: TreeNode) -> TreeNode:
    """A copy of n sharing its links (relinked by TreeModel.copy): every slot by hand
    (copy.copy of a slotted object costs several times as much)."""
    c = _new(TreeNode)
    c.id, c.children, c.parent, c.key, c.value = n.id, n.children, n.parent, n.key, n.value
    c.lock_ref, c.locks_held, c.hit_count, c.priority = (n.lock_ref, n.locks_held, n.hit_count,
                                                         n.priority)
    c.last_access_time, c.creation_time = n.last_access_time, n.creation_time
    c.heap_version, c.heap_key, c.guarded_key = n.heap_version, n.heap_key, None
    c.tlru_cached_prefix_len, c.tlru_history_len = (n.tlru_cached_prefix_len,
                                                    n.tlru_history_len)
    return c


def _key(token_ids: Sequence[int], extra_key: str | None, cache_salt: str | None) -> RadixKey:
    """A key over an event's frozen tokens, kept as they are (RadixKey() would copy a tuple
    into a list; a compact sequence stays compact)."""
    k = _new(RadixKey)
    k.token_ids, k.extra_key, k.cache_salt = token_ids, extra_key, cache_salt
    return k


def _touched(m: TreeModel, e: ev.NodesTouched) -> None:
    for nid in e.node_ids:
        m.nodes[nid].last_access_time = e.time


def _split(m: TreeModel, e: ev.NodeSplit) -> None:
    new = split_edge(m.nodes[e.node_id], e.new_node_id, e.split_len, e.time, m.page_size)
    if e.creation_time is not None:  # unified: the new node keeps the child's age
        new.creation_time = e.creation_time
    m.nodes[new.id] = new


def _inserted(m: TreeModel, e: ev.NodeInserted) -> None:
    leaf = TreeNode(e.node_id, _key(e.token_ids, e.extra_key, e.cache_salt), e.slot_ids, e.time)
    leaf.priority = e.priority
    attach(m.nodes[e.parent_id], leaf, m.page_size)
    m.nodes[leaf.id] = leaf


def _hits(m: TreeModel, e: ev.HitCounted) -> None:
    nodes = m.nodes
    path = [nodes[nid] for nid in e.node_ids]
    count_hits(nodes[0], path, e.priority, e.first_counted if e.counted else len(path))


def _lock(m: TreeModel, e: ev.LockChanged) -> None:
    m.nodes[e.node_id].lock_ref = e.lock_ref


def _leaves(m: TreeModel, e: ev.LeafSetChanged) -> None:
    nodes, leaves = m.nodes, m.leaves
    for nid in e.added:
        leaves.add(nodes[nid])
    for nid in e.removed:
        node = nodes.get(nid)
        if node is not None:
            leaves.discard(node)


def _evicted(m: TreeModel, e: ev.NodeEvicted) -> None:
    node = m.nodes.pop(e.node_id)
    detach(node, m.page_size)
    m.leaves.discard(node)


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
