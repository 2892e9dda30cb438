"""The replay: a tree rebuilt from a cache's events (TreeModel) and the sink that keeps a run's
steps with keyframes (EventLog). A consumer of events, not part of the cache.

Fed a run's events from an empty cache, a TreeModel ends equal to the cache's `snapshot()`
(tests/radix/tree/test_events.py, after every step of random runs); the live page
(scenarios/live.py) follows an engine's tree with it. Leaves out: the cache's clock, eviction
heap, size counters and allocator (the events carry their results); block-cache events.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Sequence

from radix import events as ev
from radix.tree.key import RadixKey
from radix.tree.node import ROOT_PRIORITY, TreeNode, attach, count_hits, detach, split_edge
from radix.tree.snapshot import TreeSnapshot, tree_states

# Events are grouped into steps (one public call each). An EventLog keeps its own TreeModel,
# rebuilt from the events as they arrive (so the replay law is exercised on every run), and
# copies it into a keyframe every `keyframe_every` steps; the tree at step k is the nearest
# keyframe at or before k plus the events after it: scrubbing costs O(tree + keyframe_every *
# events per step). A TreeModel changes only by `apply(event)`, through the cache's own links
# (node.py: a split is split_edge, a new leaf attach, an eviction detach, hits count_hits); its
# snapshot is snapshot.py's tree_states. `EventLog.to_jsonl` dumps a log's events as text.


class EventLog:
    """Collects a cache's events by step.

    >>> from radix.tree.radix_cache import RadixCache
    >>> log = EventLog(); c = RadixCache(sink=log)
    >>> _ = c.insert([1, 2, 3]); _ = c.insert([1, 2, 4])
    >>> log.num_steps, log.steps[2][0].op, log.snapshot_at(2).total_size
    (3, 'insert', 3)
    """

    def __init__(self, keyframe_every: int = 64, page_size: int = 1) -> None:
        if keyframe_every < 1:
            raise ValueError(f"keyframe_every must be >= 1, got {keyframe_every}")
        self.keyframe_every = keyframe_every
        self.steps: list[list[ev.Event]] = []  # closed steps, each StepStarted ... StepEnded
        self._open: list[ev.Event] = []
        self._depth = 0
        self.model = TreeModel(page_size)
        self._keyframe_steps: list[int] = [0]
        self._keyframes: list[TreeModel] = [self.model.copy()]

    # ------------------------------------------------------------------------------ recording

    def emit(self, event: ev.Event) -> None:
        self._open.append(event)
        model, kind = self.model, type(event)
        handler = model.handlers.get(kind)  # model.apply, without a call (the hot path)
        if handler is not None:
            handler(model, event)
        if kind is ev.StepStarted:
            self._depth += 1
        elif kind is ev.StepEnded:
            self._depth -= 1
            if self._depth == 0:
                self._close_step()

    def _close_step(self) -> None:
        self.steps.append(self._open)
        self._open = []
        n = len(self.steps)
        if n % self.keyframe_every == 0:
            self._keyframe_steps.append(n)
            self._keyframes.append(self.model.copy())

    # ------------------------------------------------------------------------------- reading

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def events_of(self, step: int) -> list[ev.Event]:
        """The events of step `step` (0-based), StepStarted first."""
        return self.steps[step]

    def model_at(self, step: int) -> TreeModel:
        """A fresh TreeModel of the tree after the first `step` steps (0 <= step <= num_steps)."""
        if not 0 <= step <= len(self.steps):
            raise IndexError(f"step {step} out of range 0..{len(self.steps)}")
        i = bisect.bisect_right(self._keyframe_steps, step) - 1
        model = self._keyframes[i].copy()
        for s in range(self._keyframe_steps[i], step):
            model.apply_all(self.steps[s])
        return model

    def snapshot_at(self, step: int) -> TreeSnapshot:
        return self.model_at(step).snapshot()

    def micro_events(self, step: int) -> list[ev.Event]:
        """The events inside a step that change the picture (no StepStarted/StepEnded)."""
        return [e for e in self.steps[step] if not isinstance(e, ev.StepStarted | ev.StepEnded)]

    def __iter__(self) -> Iterator[ev.Event]:
        for step in self.steps:
            yield from step

    def to_jsonl(self) -> str:
        """One JSON object per event: {"type": class name, ...fields}; a sequence field (a
        tuple, or a compact TokenRuns) as a list. The one event exporter (the Trace page's
        download too).

        >>> from radix.tree.radix_cache import RadixCache
        >>> log = EventLog(); _ = RadixCache(sink=log).insert([7, 8])
        >>> log.to_jsonl().splitlines()[4]
        '{"type": "NodeInserted", "node_id": 1, "parent_id": 0, "token_ids": [7, 8], \
"slot_ids": [7, 8], "priority": 0, "time": 2.0, "extra_key": null, "cache_salt": null}'
        """
        lines = []
        for e in self:
            row = {"type": type(e).__name__}
            for f in dataclasses.fields(e):
                v = getattr(e, f.name)
                row[f.name] = v if isinstance(v, str | int | float | type(None)) else list(v)
            lines.append(json.dumps(row, default=str))
        return "\n".join(lines) + ("\n" if lines else "")


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
        self._copy_nodes_into(out)
        return out

    def _copy_nodes_into(self, out: TreeModel) -> None:
        """`out.nodes` and `out.leaves`: copies of this model's, linked among themselves."""
        nodes = out.nodes = {i: _copy_node(n) for i, n in self.nodes.items()}
        for n in nodes.values():
            if n.parent is not None:
                n.parent = nodes[n.parent.id]
            # subtle: every node gets its own dict, an empty one too (attach fills it in place)
            n.children = {k: nodes[c.id] for k, c in n.children.items()}
        out.leaves = {nodes[n.id] for n in self.leaves}

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
    """A key over an event's tokens, kept as they are (the cache's own `Tokens`, or what a log
    compacted them to: scenarios/trace.py's CompactLog), unchecked and not converted."""
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
