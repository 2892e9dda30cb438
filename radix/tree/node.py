"""The radix tree's parts, shared by the cache (radix_cache.py) and its replay: RadixKey,
TreeNode and the edge links every mutation runs (split_edge, attach, detach, count_hits), the
results of the cache's calls, the one snapshot walk (`tree_states`), SGLang's pretty_print lines
(`format_tree`) and the invariant error; then the replay: `TreeModel`, a tree of these nodes
changed by events through the same links, and `EventLog`, the sink keeping a run's steps with
keyframes of it. Field names follow SGLang's TreeNode and RadixKey (mem_cache/radix_cache.py).
Leaves out: SGLang's host (HiCache) fields, per-page hash values, EAGLE's bigram keys and its
`limit` view; persistence of a log (`to_jsonl` dumps its events as text).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

from radix import events as ev
from radix.tokens import frozen


class RadixKey:
    """Token ids with a namespace (extra_key, cache_salt): two keys share nodes only within one
    namespace; `child_key` names a node's edge in its parent's children dict. Like SGLang's, a
    RadixKey trusts its caller: a list of ids is kept, not copied or checked (ids are checked
    where they enter: trace loaders, op traces, RadixCache's plain-list arguments), since
    building keys is on the request loop's hot path.

    >>> k = RadixKey([1, 2, 3, 4, 5])
    >>> k.child_key(1), k.child_key(2)
    (1, (1, 2))
    >>> RadixKey([1], extra_key="lora-a").child_key(1)
    (('lora-a', None), 1)
    """

    __slots__ = ("token_ids", "extra_key", "cache_salt")

    def __init__(
        self,
        token_ids: Iterable[int],
        extra_key: str | None = None,
        cache_salt: str | None = None,
    ) -> None:
        if type(token_ids) is not list and not hasattr(token_ids, "common_prefix_len"):
            # (a compact sequence, radix/tokens/, is kept as it is: never expanded per token)
            if isinstance(token_ids, str | bytes) or not isinstance(token_ids, Iterable):
                raise TypeError(f"token_ids must be a sequence of ints, "
                                f"got {type(token_ids).__name__}")
            token_ids = list(token_ids)
        self.token_ids: list[int] = token_ids  # not copied: the caller must not mutate it
        self.extra_key = extra_key  # e.g. a LoRA id
        self.cache_salt = cache_salt  # per-tenant salt

    @property
    def namespace(self) -> tuple[str | None, str | None] | None:
        """None for the default namespace, else (extra_key, cache_salt)."""
        if self.extra_key is None and self.cache_salt is None:
            return None
        return (self.extra_key, self.cache_salt)

    def __len__(self) -> int:
        return len(self.token_ids)

    def __iter__(self):
        return iter(self.token_ids)

    def __getitem__(self, idx: slice) -> RadixKey:
        if not isinstance(idx, slice):
            raise TypeError("RadixKey supports slices only; use key.token_ids[i] for one id")
        out = RadixKey.__new__(RadixKey)
        out.token_ids = self.token_ids[idx]
        out.extra_key = self.extra_key
        out.cache_salt = self.cache_salt
        return out

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RadixKey)
            and self.namespace == other.namespace
            and self.token_ids == other.token_ids
        )

    __hash__ = None  # mutable-looking; never a dict key itself

    def __repr__(self) -> str:
        head = list(self.token_ids[:10])
        more = "..." if len(self.token_ids) > 10 else ""
        ns = f", namespace={self.namespace!r}" if self.namespace else ""
        return f"RadixKey({head}{more}, len={len(self)}{ns})"


    def child_key(self, page_size: int = 1) -> Any:
        """The dict key of the edge that starts with this key: first token, or first page."""
        t = self.token_ids
        plain = t[0] if page_size == 1 else page_at(t, 0, page_size)
        ns = self.namespace
        return plain if ns is None else (ns, plain)


def page_at(tokens: Any, pos: int, page_size: int) -> tuple[int, ...]:
    """The page of `page_size` tokens from `pos` as a tuple: a paged tree's child key (a compact
    sequence builds it from its runs, TokenRuns.values_at).

    >>> page_at([5, 6, 7, 8], 1, 2)
    (6, 7)
    """
    if hasattr(tokens, "values_at"):
        return tokens.values_at(pos, page_size)
    return tuple(tokens[pos : pos + page_size])


ROOT_PRIORITY = -(2**63 - 1)  # the root's priority: SGLang's -sys.maxsize, below any real one


class TreeNode:
    """One edge of the radix tree and the node it ends in. `value` holds the KV slot ids of the
    edge, one per token. Node ids are given by the cache that owns the node (root = 0), not by a
    process-wide counter as in SGLang, so two runs of the same ops give the same ids."""

    __slots__ = (
        "id",
        "children",
        "parent",
        "key",
        "value",
        "lock_ref",
        "locks_held",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "heap_version",
        "heap_key",
        "guarded_key",
        "tlru_cached_prefix_len",
        "tlru_history_len",
    )

    def __init__(self, node_id: int, key: RadixKey, value: list[int] | None, time: float) -> None:
        self.id = node_id
        self.children: dict = {}  # child_key -> TreeNode, in insertion order (as SGLang)
        self.parent: TreeNode | None = None
        self.key = key  # the edge's tokens
        self.value = value  # KV slot ids of the edge; None once evicted
        self.lock_ref = 0  # running requests using this node or a node below it
        self.locks_held = 0  # inc_lock_ref calls on this very node not yet released
        self.last_access_time = time
        self.creation_time = time
        self.hit_count = 0  # requests that inserted through it, each once (past inserted_len)
        self.priority = 0  # max priority of the requests that inserted through it
        self.heap_version = 0  # bumps on each push to the eviction heap; older entries are stale
        self.heap_key = None  # the sort key of its latest heap entry
        self.guarded_key = None  # a long first edge's tokens + the cache's PrefixProbe (lazy)
        self.tlru_cached_prefix_len = 0  # T-LRU only: tokens from the root to this node's end
        self.tlru_history_len = 0  # T-LRU only: the branch's high-water depth (never shrinks)

    @property
    def evicted(self) -> bool:
        return self.value is None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, len={len(self.key)}, lock_ref={self.lock_ref})"


def split_edge(child: TreeNode, new_id: int, split_len: int, time: float,
               page_size: int) -> TreeNode:
    """Cuts child's edge after split_len tokens and returns the new upper node: the one split
    of the tree, run by RadixCache's walk and by the replay model's NodeSplit.

        parent -- child[0:split_len + rest]   becomes   parent -- new[0:split_len] -- child

    The new node (both its times `time`) takes the edge's first split_len tokens and slots
    (sliced copies), child's lock_ref, hit_count and priority (it stands for the same
    requests) and child's slot in the parent's dict (the order is kept).

    >>> root = TreeNode(0, RadixKey([]), [], 0.0)
    >>> a = TreeNode(1, RadixKey([5, 6, 7]), [0, 1, 2], 1.0); attach(root, a, 1)
    >>> new = split_edge(a, 2, 1, 3.0, 1)
    >>> new.key.token_ids, new.value, a.key.token_ids, a.parent is new, root.children[5] is new
    ([5], [0], [6, 7], True, True)
    """
    new = TreeNode(new_id, child.key[:split_len], child.value[:split_len], time)
    child.value = child.value[split_len:]
    child.guarded_key = None  # its edge changed (and it is no longer a first edge)
    cut_edge(child, new, page_size)
    return new


def cut_edge(child, new, page_size: int) -> None:
    """The links of a split, for any node with a key, children and a parent (TreeNode, the host
    tier's HostNode): `new`, holding the first len(new.key) tokens of child's edge, goes
    between child and its parent, taking child's lock_ref, hit_count, priority and slot in the
    parent's dict (the order is kept); child keeps the rest of its edge. Values are the
    caller's (split_edge slices one; the host tier two, either of which may be gone)."""
    new.parent = parent = child.parent
    new.lock_ref, new.hit_count, new.priority = child.lock_ref, child.hit_count, child.priority
    child.key = child.key[len(new.key):]
    child.parent = new
    new.children = {child.key.child_key(page_size): child}
    parent.children[new.key.child_key(page_size)] = new  # same dict slot, so the order is kept


def attach(parent: TreeNode, node: TreeNode, page_size: int) -> None:
    """Hangs `node` under `parent`, filed under its child key (a new leaf's one link)."""
    node.parent = parent
    parent.children[node.key.child_key(page_size)] = node


def detach(node: TreeNode, page_size: int) -> TreeNode:
    """Takes `node` out of its parent's children (an evicted leaf); returns the parent. The
    node keeps its parent link, so its path can still be read."""
    parent = node.parent
    del parent.children[node.key.child_key(page_size)]
    return parent


class MatchResult:
    """What match_prefix found: `slot_ids` (KV slots of the matched prefix, in token order),
    `last_node` (the deepest node of the match; the root when nothing matched) and `prefix_len`
    (tokens matched: len(slot_ids)).

    subtle: the slots are joined when `slot_ids` is read, a fresh sequence each read and never
    kept (SGLang 0.5.23's match does not build them either; its callers call
    path_device_indices, which builds them per call), from the path's values as they were at
    match time: a later split or eviction does not change them. A caller that needs them twice
    keeps the first; a result held on to holds no joined copy (dropping it costs nothing).

    >>> r = MatchResult([[4, 5], [6]], None, 3); r.slot_ids, r.prefix_len
    ([4, 5, 6], 3)
    >>> r.slot_ids is r.slot_ids  # joined anew on each read
    False
    """

    __slots__ = ("_values", "last_node", "prefix_len")

    def __init__(self, values: list[Sequence[int]], last_node: TreeNode, prefix_len: int) -> None:
        self._values = values  # the matched nodes' value lists, root side first
        self.last_node = last_node
        self.prefix_len = prefix_len

    @property
    def slot_ids(self) -> Sequence[int]:
        return concat_values(self._values)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, MatchResult) and self.prefix_len == other.prefix_len
                and self.last_node is other.last_node and self.slot_ids == other.slot_ids)

    __hash__ = None

    def __repr__(self) -> str:
        return f"MatchResult(prefix_len={self.prefix_len}, last_node={self.last_node!r})"


def concat_values(values: list[Sequence[int]]) -> Sequence[int]:
    """The slot ids of a path, in token order: a new list, or one compact sequence when the
    values are compact sequences with a `concat` class method.

    >>> concat_values([[1, 2], [3]]), concat_values([])
    ([1, 2, 3], [])
    """
    if not values:
        return []
    first = values[0]
    if type(first) is not list and hasattr(first, "concat"):
        return type(first).concat(values)
    if len(values) == 1:
        return list(first)
    out: list[int] = []
    for v in values:
        out += v
    return out


def count_hits(root, path: Sequence, priority: int, first: int) -> None:
    """What an insert leaves on the nodes it went through (SGLang 0.5.23's insert): the root
    and every node of `path` take max(priority); the nodes from `first` on count a hit. The one
    rule RadixCache's inserts and the replay model's HitCounted both apply.

    >>> class N: priority = hit_count = 0
    >>> root, a, b = N(), N(), N(); count_hits(root, [a, b], 2, 1)
    >>> root.priority, (a.priority, a.hit_count), (b.priority, b.hit_count)
    (2, (2, 0), (2, 1))
    """
    if root.priority < priority:
        root.priority = priority
    for i, x in enumerate(path):
        if x.priority < priority:
            x.priority = priority
        if i >= first:
            x.hit_count += 1


class InsertResult(NamedTuple):
    prefix_len: int  # tokens of the key that were already cached (their slots are duplicates)
    last_node: TreeNode  # the node the key ends in


class EvictResult(NamedTuple):
    num_evicted: int  # tokens freed (may overshoot the request: whole nodes go)
    evicted_nodes: list[TreeNode]  # in the order the policy popped them


class NodeState(NamedTuple):
    """One node of a TreeSnapshot: plain, immutable data for drawing and comparing."""

    id: int
    parent: int | None  # None for the root
    token_ids: tuple[int, ...]  # the edge's tokens
    slot_ids: tuple[int, ...]  # the edge's KV slots
    lock_ref: int
    hit_count: int
    last_access_time: float
    creation_time: float
    priority: int
    evictable_leaf: bool
    extra_key: str | None
    cache_salt: str | None
    child_ids: tuple[int, ...]  # in the parent's dict order (the order pretty_print walks)


class TreeSnapshot(NamedTuple):
    nodes: tuple[NodeState, ...]  # pre-order from the root (id 0), children sorted by child key
    page_size: int
    evictable_size: int
    protected_size: int
    step: int  # number of public calls made on the cache when the snapshot was taken

    @property
    def total_size(self) -> int:
        return self.evictable_size + self.protected_size

    def by_id(self) -> dict[int, NodeState]:
        return {n.id: n for n in self.nodes}


class InvariantError(AssertionError):
    """A broken invariant of a cache; the message names the node and the rule."""


class Inspectable(Protocol):
    """What the functions below need of a cache (RadixCache has both)."""

    def snapshot(self) -> TreeSnapshot: ...

    def check_invariants(self) -> None: ...


def tree_states(root: TreeNode, leaves: Container[TreeNode],
                page_size: int) -> tuple[NodeState, ...]:
    """The tree under `root` as NodeStates, pre-order, siblings sorted by child key (default
    namespace first, then by first page); `leaves` holds the evictable leaves. The one snapshot
    walk: RadixCache.snapshot and the replay model's (`TreeModel`, below) both run it."""
    ps = page_size

    def order(n: TreeNode) -> tuple:
        k = n.key
        return child_sort_key(tuple(k.token_ids[:ps]), k.extra_key, k.cache_salt, ps)

    out: list[NodeState] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(node_state(node, node in leaves))
        kids = node.children
        if len(kids) > 1:
            stack.extend(sorted(kids.values(), key=order, reverse=True))
        elif kids:
            stack.extend(kids.values())
    return tuple(out)


def node_state(node: TreeNode, evictable: bool) -> NodeState:
    """One node as plain data (a NodeState); its sequences frozen (a compact one stays
    compact). Positional: a snapshot builds one per node."""
    key, parent = node.key, node.parent
    return NodeState(
        node.id, None if parent is None else parent.id, frozen(key.token_ids),
        frozen(node.value), node.lock_ref, node.hit_count, node.last_access_time,
        node.creation_time, node.priority, evictable, key.extra_key, key.cache_salt,
        tuple([c.id for c in node.children.values()]),
    )


def child_sort_key(tokens: tuple[int, ...], extra_key, cache_salt, page_size: int) -> tuple:
    """Orders siblings: default namespace first, then by namespace text, then by first page."""
    ns = (extra_key, cache_salt)
    return (ns != (None, None), repr(ns), tokens[:page_size])


def format_tree(
    snap: TreeSnapshot,
    decode: Callable[[list[int]], str] | None = None,
    show_hits: bool = False,
    mark_leaves: bool = False,
    *,
    ids: Callable[[Sequence[int]], str] | None = None,
) -> str:
    """SGLang's RadixCache.pretty_print lines for a snapshot: a stack walk from the root, one
    line per node (indent, edge length, first ten token ids, `r=lock_ref`), then `#tokens: N`.
    `ids` renders a node's tokens in place of
    its first ten token ids (a Mooncake trace's: radix.traces.hashview.block_label).

    >>> from radix.tree.radix_cache import RadixCache
    >>> c = RadixCache(); _ = c.insert([1, 2, 3]); _ = c.insert([1, 2, 4])
    >>> print(format_tree(snapshot(c)))
     0 [] r=1
       2 [1, 2] r=0
         1 [4] r=0
         1 [3] r=0
    #tokens: 4
    """
    by_id = snap.by_id()
    lines = []
    stack = [(by_id[0], 0)]
    while stack:
        node, indent = stack.pop()
        shown = str(list(node.token_ids[:10])) if ids is None else f"[{ids(node.token_ids)}]"
        parts = [" " * indent, str(len(node.token_ids)), shown, f"r={node.lock_ref}"]
        if show_hits:
            parts.append(f"hits={node.hit_count}")
        if mark_leaves and node.evictable_leaf:
            parts.append("[evictable]")
        if decode is not None and node.token_ids:
            parts.append(repr(decode(list(node.token_ids))[:60]))
        lines.append(" ".join(parts))
        for cid in node.child_ids:
            stack.append((by_id[cid], indent + 2))
    lines.append(f"#tokens: {snap.total_size}")
    return "\n".join(lines)


def snapshot(cache: Inspectable) -> TreeSnapshot:
    """The cache as plain immutable data (RadixCache.snapshot): nodes in pre-order, siblings
    sorted by child key."""
    return cache.snapshot()


def check_invariants(cache: Inspectable) -> None:
    """Raises InvariantError on the first broken rule of a RadixCache (its check_invariants:
    links, child keys, lock counts against the locks held, sizes, the leaf set, the heap).

    >>> from radix.tree.radix_cache import RadixCache
    >>> c = RadixCache(); _ = c.insert([1, 2, 3]); c.evictable_size_ = 99
    >>> check_invariants(c)
    Traceback (most recent call last):
    ...
    radix.tree.node.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
    """
    cache.check_invariants()


# ---------------------------------------------------------------- the replay
# Events are grouped into steps (one public call each). An EventLog keeps its own TreeModel,
# rebuilt from the events as they arrive (so the replay law is exercised on every run), and
# copies it into a keyframe every `keyframe_every` steps; the tree at step k is the nearest
# keyframe at or before k plus the events after it: scrubbing costs O(tree + keyframe_every *
# events per step). A TreeModel changes only by `apply(event)`, through the cache's own links
# above (a split is split_edge, a new leaf attach, an eviction detach, hits count_hits); its
# snapshot is tree_states. Fed a run's events from an empty cache, it ends equal to the cache's
# `snapshot()` (tests/radix/tree/test_events.py, after every step of random runs); the live page
# (scenarios/live.py) follows an engine's tree with it. Left out of the model: the cache's
# clock, eviction heap, size counters and allocator (the events carry their results: times,
# leaf-set changes, lock counts); block-cache events.


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
