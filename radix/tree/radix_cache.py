"""RadixCache: a faithful model of SGLang's radix tree of cached KV prefixes, in one module as
SGLang keeps it (mem_cache/radix_cache.py, evict_policy.py): the key and node with the edge links
every mutation runs, the eviction strategies and their heap, the cache, its snapshot,
pretty_print and invariant check, then the replay (`TreeModel`, a tree of these nodes changed by
events through the same links; `EventLog`, the sink keeping a run's steps with keyframes).

An edge is a run of tokens used by exactly the same requests; a node is where two of them
stopped agreeing. The cache, read top to bottom:

    match_prefix   the longest cached prefix of a key; splits the node the match ends inside
    insert         caches a key: walks what is cached, grows one new leaf for the rest
    evict          pops evictable leaves in policy order; a parent left childless competes too
    inc/dec_lock_ref   walk to the root; tokens move between evictable and protected on 0 <-> 1
    checkpoint / release_kv_cache   a request's KV into the tree, its lock moved or dropped
                   (SGLang 0.5.23; cache_unfinished_req / cache_finished_req are the same)

Deliberate differences (tools/diff_sglang.py checks the rest against SGLang's own code): time is
an injected clock (read once per walk and once per new node, where SGLang reads
time.monotonic()); evict keeps its heap across calls (`EvictionHeap`); ties go to the older node
id; insert page-aligns its key (SGLang's callers do); node ids belong to the cache; every
mutation is emitted as an event. `flavor="unified"` (the default) follows 0.5.23's
UnifiedRadixCache where it differs from the classic class (`split_times`). Field names follow
SGLang's TreeNode and RadixKey. Leaves out: HiCache tiers (radix/hosttier/), EAGLE bigram keys
and its `limit` view, SWA/mamba components, per-page hash values; persistence of a log
(`to_jsonl` dumps its events as text).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import json
from array import array
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from radix import events as ev
from radix.request import Allocator, Req
from radix.tokens import TokenRuns, Tokens, head, tokens
from radix.tokens.runs import PrefixProbe, gallop_match

# -------------------------------------------------------------------------------- key and node

class RadixKey:
    """Token ids with a namespace (extra_key, cache_salt): two keys share nodes only within one
    namespace; `child_key` names a node's edge in its parent's children dict. The ids are kept
    as `Tokens` (radix/tokens/: a list, or TokenRuns for compact ids): what is one already (a
    list, a trace's prompt, a request's `all_ids`, a slice of either) is kept as it is, not
    copied, as SGLang's RadixKey keeps its List[int]; anything else is converted once. Like
    SGLang's, a RadixKey trusts its caller: ids are not checked (they are where they enter:
    trace loaders, op traces, RadixCache's plain-list arguments, which it copies), and the
    caller never mutates a list it gave, since building keys is on the request loop's hot path.

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
        if token_ids.__class__ is not list and token_ids.__class__ is not TokenRuns:
            if isinstance(token_ids, str | bytes) or not isinstance(token_ids, Iterable):
                raise TypeError(f"token_ids must be a sequence of ints, "
                                f"got {type(token_ids).__name__}")
            token_ids = tokens(token_ids)  # converted once (a compact one stays runs)
        self.token_ids: Tokens = token_ids  # shared, never copied: the caller must not mutate it
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
        node.id, None if parent is None else parent.id, _frozen(key.token_ids),
        _frozen(node.value), node.lock_ref, node.hit_count, node.last_access_time,
        node.creation_time, node.priority, evictable, key.extra_key, key.cache_salt,
        tuple([c.id for c in node.children.values()]),
    )


def _frozen(seq: Sequence[int]) -> tuple[int, ...] | TokenRuns:
    """A snapshot's own copy: a tuple for a list (snapshots are plain, immutable, hashable data,
    compared with tuples by the pages), a compact sequence as `Tokens` (never expanded)."""
    if isinstance(seq, TokenRuns):
        return tokens(seq)
    return seq if seq.__class__ is tuple else tuple(seq)


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
    radix.tree.radix_cache.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
    """
    cache.check_invariants()


# ------------------------------------------------------------------------------------ eviction
# The eight eviction strategies of SGLang 0.5.23 (mem_cache/evict_policy.py), and the heap
# that orders the evictable leaves by them.
#
# A strategy is a sort key over a leaf: the smallest key is evicted first. SGLang breaks exact ties
# by heap order over a set (arbitrary); we break them by node id (the older node first) so that
# every run replays exactly. SGLang heapifies every evictable leaf on each `evict` call;
# `EvictionHeap` keeps its heap across calls and drops stale entries lazily, which pops the same
# order in O(k log n) for k leaves. T-LRU (`make_tlru`) exists in 0.5.23's UnifiedRadixCache only
# (the classic class lacks its bookkeeping); ours keeps that bookkeeping in either flavor.
# Leaves out: SGLang's experimental strategies beyond these eight.

SortKey = Any  # a float or a tuple of numbers; smaller is evicted first
HEAP_SLACK = 64  # stale heap entries tolerated beyond 2 per evictable leaf before a rebuild


def lru(node) -> SortKey:
    """Least recently used first."""
    return node.last_access_time


def mru(node) -> SortKey:
    """Most recently used first."""
    return -node.last_access_time


def fifo(node) -> SortKey:
    """Oldest node first."""
    return node.creation_time


def filo(node) -> SortKey:
    """Newest node first."""
    return -node.creation_time


def lfu(node) -> SortKey:
    """Fewest hits first, then least recently used."""
    return (node.hit_count, node.last_access_time)


def priority(node) -> SortKey:
    """Lowest request priority first, then least recently used."""
    return (node.priority, node.last_access_time)


def make_slru(protected_threshold: int = 2) -> Callable[[Any], SortKey]:
    """Segmented LRU: probationary (hit_count < threshold) before protected, LRU within each.

    >>> class N: hit_count, last_access_time = 2, 5.0
    >>> make_slru(2)(N)
    (1, 5.0)
    """
    if not isinstance(protected_threshold, int) or protected_threshold < 0:
        raise ValueError(f"protected_threshold must be an int >= 0, got {protected_threshold!r}")

    def slru(node) -> SortKey:
        return (1 if node.hit_count >= protected_threshold else 0, node.last_access_time)

    return slru


def make_tlru(threshold: int | float = 0,
              next_prompt_estimate: int | float = 0) -> Callable[[Any], SortKey]:
    """Tail-optimized LRU (SGLang's TLRUStrategy, after Zhang et al., arXiv:2510.15152).

    A conversation whose branch reached L tokens (`tlru_history_len`, the high-water depth,
    which does not shrink when its tail is evicted) and whose next prompt adds about Q tokens
    must keep L + Q - threshold tokens cached for its next prefill to stay within the TTFT
    budget. A leaf whose parent path alone already holds that many is "TEL-safe": evicting it
    costs no tail latency, so it sorts before every other leaf (key -1); then LRU. Both
    figures are tokens (the paper counts blocks: multiply by the page size).

    A branch of 100 tokens as 60 + 40, threshold 50, Q 10: budget 100 + 10 - 50 = 60; the
    40-token leaf sits on 60 cached tokens, 60 >= 60, so it is TEL-safe.

    >>> class N: tlru_history_len, tlru_cached_prefix_len, key, last_access_time = (
    ...     100, 100, [0] * 40, 7.0)
    >>> make_tlru(50, 10)(N)
    (-1, 7.0)
    """
    for name, x in (("threshold", threshold), ("next_prompt_estimate", next_prompt_estimate)):
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise TypeError(f"T-LRU {name} must be a number of tokens, got {x!r}")

    def tlru(node) -> SortKey:
        budget = max(node.tlru_history_len + next_prompt_estimate - threshold, 0)
        tel_safe = node.tlru_cached_prefix_len - len(node.key) >= budget
        return (-1 if tel_safe else 0, node.last_access_time)

    return tlru


def tlru_new_node(node, parent) -> None:
    """T-LRU bookkeeping for a new leaf under `parent`: its depth, and the high-water depth of
    every ancestor it deepens (SGLang's _set_tlru_lens_and_raise_history).

    >>> class N: tlru_cached_prefix_len = tlru_history_len = 0; key = (); parent = None
    >>> root, leaf = N(), N(); leaf.key, leaf.parent = [1, 2, 3], root
    >>> tlru_new_node(leaf, root); leaf.tlru_cached_prefix_len, root.tlru_history_len
    (3, 3)
    """
    depth = node.tlru_cached_prefix_len = parent.tlru_cached_prefix_len + len(node.key)
    node.tlru_history_len = max(node.tlru_history_len, depth)
    x = parent
    while x is not None and x.tlru_history_len < depth:
        x.tlru_history_len = depth
        x = x.parent


def tlru_split(new, child, split_len: int) -> None:
    """A split adds no depth: the new upper node sits split_len below its parent and inherits
    the branch's high-water mark; the child keeps its own."""
    new.tlru_cached_prefix_len = new.parent.tlru_cached_prefix_len + split_len
    new.tlru_history_len = child.tlru_history_len


POLICIES = ("lru", "mru", "fifo", "filo", "lfu", "priority", "slru", "tlru")

def get_strategy(
    name: str, policy_config: Mapping[str, Any] | None = None
) -> Callable[[Any], SortKey]:
    """The sort-key function for a policy name.

    >>> get_strategy("slru", {"protected_threshold": 3}).__name__
    'slru'
    """
    name = name.lower()
    config = dict(policy_config or {})
    if name == "slru":
        threshold = config.pop("protected_threshold", 2)
        strategy = make_slru(threshold)
    elif name == "tlru":
        strategy = make_tlru(config.pop("threshold", 0), config.pop("next_prompt_estimate", 0))
    elif name in POLICIES:
        strategy = globals()[name]
    else:
        raise ValueError(f"unknown eviction policy {name!r}; choose one of {', '.join(POLICIES)}")
    if config:
        raise ValueError(f"unknown policy_config keys for {name!r}: {sorted(config)}")
    return strategy


class EvictionHeap:
    """The evictable leaves (`leaves`, SGLang's `evictable_leaves` set) in eviction order.

    Heap entries are (sort key, node id, version, node), invalidated lazily: a node's
    `heap_version` bumps whenever it gets a fresh entry, so its older entries are skipped on pop,
    as is any entry whose node left the set. While a node stays in the set its latest entry stays
    in the heap, so `touch` pushes only when the node's sort key moved.

    >>> class N:
    ...     def __init__(self, i, t): self.id, self.last_access_time, self.heap_version = i, t, 0
    >>> a, b = N(1, 5.0), N(2, 3.0); h = EvictionHeap(lru)
    >>> h.add(a); h.add(b); h.pop().id  # b was used longer ago
    2
    """

    def __init__(self, sort_key: Callable[[Any], SortKey]) -> None:
        self.sort_key = sort_key
        self.leaves: set = set()  # the evictable leaves
        self.entries: list = []  # a heapq list of (sort key, node id, version, node)

    def add(self, node: Any) -> None:
        self.leaves.add(node)
        self._push(node)

    def discard(self, node: Any) -> None:
        self.leaves.discard(node)  # its entries go stale

    def touch(self, node: Any) -> None:
        """A walk wrote `node`'s access time: if it is in the set and its key moved, re-push."""
        if node in self.leaves and self.sort_key(node) != node.heap_key:
            self._push(node)

    def pop(self) -> Any | None:
        """The first leaf in eviction order, taken out of the set; None when the set is empty."""
        entries, leaves = self.entries, self.leaves
        while entries:
            _, _, version, node = heapq.heappop(entries)
            if version == node.heap_version and node in leaves:
                leaves.discard(node)
                return node
        return None

    def _push(self, node: Any) -> None:
        node.heap_version += 1
        node.heap_key = key = self.sort_key(node)
        heapq.heappush(self.entries, (key, node.id, node.heap_version, node))
        if len(self.entries) > 2 * len(self.leaves) + HEAP_SLACK:
            self._rebuild()

    def _rebuild(self) -> None:
        """One fresh entry per leaf, O(n); in place, since a running evict holds the list."""
        entries = []
        for node in self.leaves:
            node.heap_version += 1
            node.heap_key = key = self.sort_key(node)
            entries.append((key, node.id, node.heap_version, node))
        heapq.heapify(entries)
        self.entries[:] = entries

    def check(self) -> str | None:
        """What is wrong with the heap, or None (for check_invariants)."""
        live = {e[3] for e in self.entries if e[2] == e[3].heap_version}
        for node in self.leaves:
            if node not in live:
                return f"evictable leaf {node.id} has no live heap entry"
        for key, _, version, node in self.entries:
            if version == node.heap_version and node in self.leaves and key != self.sort_key(node):
                return f"heap entry of leaf {node.id} has a stale sort key"
        return None


# -------------------------------------------------------------------------- the unified flavor
# What SGLang 0.5.23's UnifiedRadixCache does differently from its classic RadixCache, on a
# standard full-attention model (one FULL component), as found by driving both real classes.
#
# tools/diff_sglang_unified.py drives our tree beside the unified cache with the Rust TreeCore
# (0.5.23's default) and with the Python TreeCore (unified_cache/unified_tree_core.py). With our
# classic flavor, the lifecycles agree except where a split's times matter:
#
#     split   the new upper node keeps the child's creation_time (classic: it reads the clock,
#             so it is younger than the child); the child, not the new node, takes the last
#             clock read (unified: child.last_access_time is set after the new node is made)
#
# so FIFO and FILO evict differently after a split (found: `--flavor classic`, page 1, fifo
# seed 3 and filo seed 2). T-LRU (`make_tlru`) exists only in the unified cache.
# Leaves out: SWA and Mamba components, sessions, storage prefetch, the host tier (its own
# sub-package, radix/hosttier/; docs/HOST_TIER.md).


def split_times(cache: RadixCache, new: TreeNode, child: TreeNode) -> None:
    """After _split_node made `new` above `child` (new read the clock when it was made): the
    unified TreeCore's times. `new` inherits the child's creation time; the child is touched
    after the new node exists, so it is the younger of the two.

        classic: new.creation = new.last_access = t1 > child.last_access = t0
        unified: new.creation = child.creation,  child.last_access = t2 > new.last_access = t1
    """
    new.creation_time = child.creation_time
    child.last_access_time = cache.clock()


# ----------------------------------------------------------------------------------- the cache

FLAVORS = ("classic", "unified")  # radix_cache.RadixCache, or 0.5.23's UnifiedRadixCache
GUARD_MIN_LEN = 64  # a first edge at least this long is compared in place (PrefixProbe)
INT64_MAX = 2**63 - 1


def prompt_boundary_priority(prompt_len: int, n: int, priority: int) -> int | None:
    """SGLang 0.5.23's prompt-boundary rule of a checkpoint (both radix_cache.py and
    unified_radix_cache.py `checkpoint_into_tree`): after caching n tokens (page-aligned), the
    aligned prompt of `prompt_len` tokens is inserted alone with priority + 1 (capped at int64),
    splitting the leaf at the boundary so eviction takes the output first. The priority of
    that insert, or None when there is none (an empty prompt, or nothing cached past it).

    >>> prompt_boundary_priority(5, 8, 0), prompt_boundary_priority(8, 8, 0)
    (1, None)
    """
    return min(priority + 1, INT64_MAX) if 0 < prompt_len < n else None


class LogicalClock:
    """A counter: each read returns the next integer as a float, so runs replay exactly.

    >>> c = LogicalClock(); c(), c()
    (1.0, 2.0)
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class RadixCache:
    """SGLang's RadixCache over integer KV slot ids.

    >>> c = RadixCache()
    >>> c.insert(RadixKey([1, 2, 3])).prefix_len, c.insert(RadixKey([1, 2, 4])).prefix_len
    (0, 2)
    >>> c.match_prefix(RadixKey([1, 2, 4, 9])).prefix_len
    3
    """

    def __init__(
        self,
        page_size: int = 1,
        eviction_policy: str = "lru",
        policy_config: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
        sink: ev.EventSink | None = None,
        disable: bool = False,
        allocator: Allocator | None = None,
        flavor: str = "unified",
        kv_sink: ev.EventSink | None = None,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {', '.join(FLAVORS)}, got {flavor!r}")
        self.flavor = flavor  # which SGLang class the tree follows (`split_times`)
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.page_size = page_size
        self.eviction_policy = eviction_policy.lower()
        self.policy_config = dict(policy_config or {})
        self.sort_key = get_strategy(self.eviction_policy, self.policy_config)
        self._tlru = self.eviction_policy == "tlru"  # keeps the T-LRU depths on the nodes
        self.clock = clock if clock is not None else LogicalClock()
        self._sink = sink
        # hears only what is stored and evicted (KeyInserted, LeafEvicted), as SGLang's
        # kv_event_queue / vLLM's enable_kv_cache_events: no steps, and the fast paths stay on
        self.kv_sink = kv_sink
        self.disable = disable
        self.allocator = allocator  # where evicted and duplicate slots go back (None: nowhere)
        self._probe = PrefixProbe()  # compares long first edges without slicing the key
        self.num_steps = 0  # public calls made so far (the event log's step counter)
        self.reset()

    def reset(self) -> None:
        """Empties the tree (slots of cached nodes are not freed: the caller owns the pool)."""
        self._begin("reset")
        self._next_id = 1
        self.root_node = TreeNode(0, RadixKey([]), [], 0.0)
        self.root_node.lock_ref = 1  # the root is never evicted
        self.root_node.priority = ROOT_PRIORITY
        self._nodes: dict[int, TreeNode] = {0: self.root_node}  # live nodes by id
        self._leaves = EvictionHeap(self.sort_key)
        self.evictable_size_ = 0
        self.protected_size_ = 0
        self._emit(ev.CacheReset())
        self._end("reset")

    # ----------------------------------------------------------------------- match and insert

    def match_prefix(self, key: RadixKey | Sequence[int], rid: str | None = None) -> MatchResult:
        """Longest cached prefix of `key`, page-aligned; splits the node a match ends inside.

        Writes one access time to the root and each node entered; never changes hit_count or
        priority. With disable=True, every match is empty.

        >>> c = RadixCache(); _ = c.insert(RadixKey([1, 2, 3, 4]))
        >>> r = c.match_prefix(RadixKey([1, 2, 9])); r.prefix_len, len(c.root_node.children)
        (2, 1)
        >>> [len(n.key) for n in c.root_node.children.values()]  # [1,2,3,4] split into 2 + 2
        [2]
        """
        if type(key) is not RadixKey:
            key = self._as_key(key)
        self._begin("match_prefix", rid, "key of {:,} tokens", len(key))
        result = self._match(key)
        self._end("match_prefix")
        return result

    def insert(
        self,
        key: RadixKey | Sequence[int],
        value: Sequence[int] | None = None,
        priority: int = 0,
        chunked: bool = False,
        rid: str | None = None,
        *,
        inserted_len: int = 0,
    ) -> InsertResult:
        """Caches `key` with KV slots `value` (the token ids when None); returns the prefix
        length that was already cached. Existing values are never overwritten: the caller frees
        its own slots below prefix_len. Every node walked and created takes max(priority).

        Hits follow SGLang 0.5.23's InsertParams.inserted_len: the caller already inserted
        key[:inserted_len], so only nodes ending past it count a hit. `chunked=True` (the seed
        chapter's flag: raise priorities, count no hit) is inserted_len=len(key).

        >>> c = RadixCache(); c.insert([1, 2, 3]).prefix_len, c.insert([1, 2, 3, 4]).prefix_len
        (0, 3)
        >>> c.total_size(), c.insert([1, 2, 3, 4, 5], inserted_len=4).last_node.hit_count
        (4, 1)
        >>> [n.hit_count for n in c.root_node.children.values()]  # [1 2 3] ended before 4
        [2]
        """
        key = self._as_key(key)
        self._begin("insert", rid, "key of {:,} tokens", len(key))
        result = self._insert(key, value, priority or 0, len(key) if chunked else inserted_len)
        self._end("insert")
        return result

    def _match(self, key: RadixKey) -> MatchResult:
        if self.disable or len(key.token_ids) < self.page_size:
            return MatchResult([], self.root_node, 0)
        path, prefix_len, cut, t = self._walk(key)
        node = path[-1] if path else self.root_node
        self._leaves.touch(node)
        self._record_match(path, cut, t, self._aligned(key), prefix_len)
        return MatchResult([n.value for n in path], node, prefix_len)

    def _rematch_tail(self, node: TreeNode, prefix_len: int, need: int) -> Sequence[int]:
        """_match of a key that ends exactly at `node` (a checkpoint's key, just inserted),
        returning only the last `need` slot ids of the match: the same effects and events (one
        clock read written to the root and the path, the leaf set touched, NodesTouched and
        PrefixMatched) found by walking up the parents instead of comparing tokens down, and
        only the deepest nodes' values joined."""
        path = []
        x, root = node, self.root_node
        while x is not root:
            path.append(x)
            x = x.parent
        t = self.clock()
        root.last_access_time = t
        for x in path:
            x.last_access_time = t
        self._leaves.touch(node)
        assert sum(len(x.value) for x in path) == prefix_len, prefix_len
        self._record_match(path[::-1], None, t, prefix_len, prefix_len)
        values, got = [], 0
        for x in path:  # leaf first
            if got >= need:
                break
            values.append(x.value)
            got += len(x.value)
        values.reverse()
        tail = concat_values(values)
        return tail[got - need:] if got > need else tail

    def _raise_prompt(self, node: TreeNode, n: int, prompt_len: int, priority: int) -> None:
        """The prompt-boundary insert of a checkpoint (`_insert(key[:prompt_len], ...,
        priority, prompt_len)`) for a key of n tokens that ends at `node`, just inserted: the
        same effects (one clock read written to the root and the path, the edge holding the
        boundary split, priorities raised, the leaf set touched; nothing new cached, no hit
        counted, the same events) found by walking up from `node` instead of comparing tokens
        down. Unlike _insert, the kv sink hears no KeyInserted: nothing new is stored."""
        root = self.root_node
        end, x = n, node
        while end - len(x.key) >= prompt_len:  # x lies wholly past the boundary
            end -= len(x.key)
            x = x.parent
        t = self.clock()
        root.last_access_time = t
        x.last_access_time = t
        # the boundary falls inside x's edge: cut it there (the new upper node keeps its own
        # creation time, as after the walk's split)
        top = self._split_node(x, prompt_len - (end - len(x.key)), t) if end > prompt_len else x
        path = []
        y = top
        while y is not root:
            if y is not top:
                y.last_access_time = t
            path.append(y)
            y = y.parent
        path.reverse()
        count_hits(root, path, priority, len(path))
        self._leaves.touch(top)
        self._record_insert(path, len(path), None if top is x else x, t, priority, len(path))

    def _insert(self, key: RadixKey, value, priority: int, inserted_len: int) -> InsertResult:
        if self.disable:
            return InsertResult(0, self.root_node)
        n = self._aligned(key)  # an unaligned tail is never cached
        value = key.token_ids if value is None else _check_value(value, len(key))
        if self.kv_sink is not None:
            self.kv_sink.emit(ev.KeyInserted(key.token_ids, key.namespace))
        path, prefix_len, cut, t = self._walk(key)
        walked = len(path)
        node = path[-1] if path else self.root_node
        if prefix_len < n:
            # a whole key becomes the leaf's own (shared, as Tokens are: radix/tokens/)
            edge = key if prefix_len == 0 and n == len(key) else key[prefix_len:n]
            node = self._add_leaf(node, edge, value[prefix_len:n], priority)
            path.append(node)
        # a node counts a hit when it ends past inserted_len (SGLang: total_prefix_length >
        # inserted_len); path ends grow, so the counted nodes are a suffix of the path
        first, end = len(path), 0
        for i, x in enumerate(path):
            end += len(x.key)
            if end > inserted_len:
                first = i
                break
        count_hits(self.root_node, path, priority, first)
        self._leaves.touch(node)
        self._record_insert(path, walked, cut, t, priority, first)
        return InsertResult(prefix_len, node)

    def _walk(self, key: RadixKey) -> tuple[list[TreeNode], int, TreeNode | None, float]:
        """The one walk of match and insert: follows key from the root, writing one access time
        to the root and every node entered; where the match ends inside an edge, that node is
        split (`_split_node`) and the walk stops. Returns (the nodes of the matched path, root
        excluded and split nodes included, the matched length, the lower half of the edge cut
        or None, the walk's time) for the caller's observation hook.

            root -- [1 2 3 4] -- ...     key [1 2 9]: the match ends after 2 tokens of the edge
            root -- [1 2] -- [3 4] -- ...   so the edge is cut there and [1 2] ends the path

        An edge is compared whole with one slice compare; a long first edge (a shared system
        prompt, compared on every request) in place, without copying the key (`_starts_with`);
        a compact key (TokenRuns) run by run, in place.
        """
        t = self.clock()
        root, tok, ps = self.root_node, key.token_ids, self.page_size
        root.last_access_time = t
        n = len(tok)
        if ps > 1:
            n -= n % ps
        ns = key.namespace
        runs = isinstance(tok, TokenRuns)  # compact: compared in place, by runs
        node, pos, path = root, 0, []
        while pos < n:
            first = tok[pos] if ps == 1 else page_at(tok, pos, ps)  # the child key
            child = node.children.get(first if ns is None else (ns, first))
            if child is None:
                break
            child.last_access_time = t
            edge = child.key.token_ids
            m = len(edge)
            if n - pos < m:
                same = False
            elif runs and isinstance(edge, TokenRuns):
                same = tok.matches_at(pos, edge)
            elif pos or m < GUARD_MIN_LEN:
                same = tok[pos : pos + m] == edge  # usually the whole edge matches
            else:  # a long first edge (a shared system prompt): no copy of the key's tokens
                same = self._starts_with(tok, child, m)
            if not same:
                m = gallop_match(edge, tok[pos:n])
                if ps > 1:
                    m -= m % ps
                pos += m
                path.append(self._split_node(child, m, t))
                return path, pos, child, t
            pos += m
            node = child
            path.append(node)
        return path, pos, None, t

    # ------------------------------------------------------------------ observation hooks
    # One per mutation site (as SGLang's _record_store_event / _record_remove_event): each
    # says nothing when no sink listens.

    def _touched_ids(self, path: list[TreeNode], cut: TreeNode | None) -> tuple[int, ...]:
        """The root and each node a walk entered: `path` but, where the walk cut an edge, its
        lower half `cut` (classic) or nothing (unified: the split touched it after the walk's
        time, `split_times`)."""
        ids = [0, *(x.id for x in path)]
        if cut is not None:
            if self.flavor == "unified":
                ids.pop()
            else:
                ids[-1] = cut.id
        return tuple(ids)

    def _record_match(self, path, cut, t: float, key_len: int, prefix_len: int) -> None:
        if self._sink is not None:
            self._sink.emit(ev.NodesTouched(self._touched_ids(path, cut), t))
            self._sink.emit(ev.PrefixMatched(tuple(x.id for x in path), key_len, prefix_len))

    def _record_insert(self, path, walked: int, cut, t: float, priority: int,
                       first: int) -> None:
        """path[:walked] was walked, the rest added; nodes from `first` on counted a hit."""
        if self._sink is not None:
            self._sink.emit(ev.NodesTouched(self._touched_ids(path[:walked], cut), t))
            self._sink.emit(ev.HitCounted(tuple(x.id for x in path), priority,
                                          first < len(path), first))

    def _record_split(self, child: TreeNode, new: TreeNode, created: float) -> None:
        if self._sink is not None:
            self._sink.emit(ev.NodeSplit(child.id, new.id, new.parent.id, len(new.key), created,
                                         new.creation_time if new.creation_time != created
                                         else None))
            if self.flavor == "unified":
                self._sink.emit(ev.NodesTouched((child.id,), child.last_access_time))

    def _record_new_leaf(self, leaf: TreeNode) -> None:
        if self._sink is not None:
            key = leaf.key
            self._sink.emit(ev.NodeInserted(leaf.id, leaf.parent.id, tokens(key.token_ids),
                                            tokens(leaf.value), leaf.priority,
                                            leaf.creation_time, key.extra_key, key.cache_salt))

    def _record_leaf_set(self, node: TreeNode, is_leaf: bool) -> None:
        if self._sink is not None:
            ids = (node.id,)
            self._sink.emit(ev.LeafSetChanged(ids, ()) if is_leaf else ev.LeafSetChanged((), ids))

    def _starts_with(self, tok, child: TreeNode, m: int) -> bool:
        """tok[:m] == child's edge (m tokens, len(tok) >= m) for a child of the root; two lists
        are scanned in place by the cache's PrefixProbe against the edge + probe, built once
        per edge (and dropped when the edge is cut)."""
        edge = child.key.token_ids
        if tok.__class__ is not list or edge.__class__ is not list:
            return tok[:m] == edge
        if len(tok) == m:  # the probe would not be reached (see PrefixProbe)
            return tok == edge
        guarded = child.guarded_key
        if guarded is None:
            guarded = child.guarded_key = self._probe.guard(edge)
        return self._probe.starts_with(tok, guarded)

    def _split_node(self, child: TreeNode, split_len: int, t: float) -> TreeNode:
        """Cuts child's edge after split_len tokens (split_edge, the replay model's split
        too); returns the new prefix node (parent side). Sizes and the leaf set do not change.
        subtle: the new node reads the clock itself (SGLang's TreeNode constructor reads
        time.monotonic()), so it is younger than the walk's time `t`, which the child keeps.
        """
        created = self.clock()
        new = split_edge(child, self._next_id, split_len, created, self.page_size)
        self._next_id += 1
        if self._tlru:
            tlru_split(new, child, split_len)
        self._nodes[new.id] = new
        if self.flavor == "unified":  # the new node keeps the child's age (split_times)
            split_times(self, new, child)
        self._record_split(child, new, created)
        self._leaves.touch(child)  # the walk touched it before cutting: its sort key moved
        return new

    def _add_leaf(self, parent: TreeNode, key: RadixKey, value, priority: int) -> TreeNode:
        t = self.clock()  # a new node reads the clock itself, as in SGLang (see _split_node)
        leaf = TreeNode(self._next_id, key, value, t)
        self._next_id += 1
        leaf.priority = priority
        attach(parent, leaf, self.page_size)
        if self._tlru:
            tlru_new_node(leaf, parent)
        self._nodes[leaf.id] = leaf
        self.evictable_size_ += len(key)
        self._record_new_leaf(leaf)
        self._update_leaf_status(parent)
        self._update_leaf_status(leaf)
        return leaf

    # ---------------------------------------------------------------------------------- evict

    def evict(self, num_tokens: int) -> EvictResult:
        """Frees at least `num_tokens` (whole leaves, in policy order) or all that is evictable.
        A parent whose last child goes becomes a leaf and competes in the same call.

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); _ = c.insert([1, 2, 4])
        >>> r = c.evict(1); r.num_evicted, c.total_size()  # the older leaf [3] goes first
        (1, 3)
        """
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        self._begin("evict", None, "{:,} tokens", num_tokens)
        evicted: list[TreeNode] = []
        num_evicted = 0
        while not self.disable and num_evicted < num_tokens:
            node = self._leaves.pop()
            if node is None:
                break
            num_evicted += len(node.value)
            self._delete_leaf(node)
            evicted.append(node)
        self._end("evict")
        return EvictResult(num_evicted, evicted)

    def _delete_leaf(self, node: TreeNode) -> None:
        parent = detach(node, self.page_size)
        del self._nodes[node.id]
        self._leaves.discard(node)
        self.evictable_size_ -= len(node.key)
        slot_ids, node.value = node.value, None  # evicted
        self._free(slot_ids)
        self._record_evicted(node, parent, slot_ids)
        self._update_leaf_status(parent)  # it may become a candidate in this same call

    def _record_evicted(self, node: TreeNode, parent: TreeNode, slot_ids) -> None:
        """The observation hook of an eviction: the step's events to the sink, the path's
        tokens to the kv sink (node is already out of the tree; its parent links remain)."""
        if self._sink is not None:
            self._sink.emit(ev.LeafSetChanged((), (node.id,)))
            self._sink.emit(ev.NodeEvicted(node.id, parent.id, len(slot_ids), tokens(slot_ids),
                                           node.heap_key))
        if self.kv_sink is not None:
            parts, x = [], node
            while x.parent is not None:
                parts.append(x.key.token_ids)
                x = x.parent
            parts.reverse()
            self.kv_sink.emit(ev.LeafEvicted(node.id, _concat_tokens(parts), node.key.namespace,
                                             len(node.key)))

    def _update_leaf_status(self, node: TreeNode) -> None:
        """node is an evictable leaf iff it is live, unlocked, not the root and has no child.

        subtle: children are always live here (evict deletes a leaf from its parent), so "no
        live child" is "no child", as in SGLang's plain RadixCache.
        """
        is_leaf = node.lock_ref == 0 and not node.children and node.value is not None
        leaves = self._leaves
        if is_leaf == (node in leaves.leaves):
            return
        if is_leaf:
            leaves.add(node)
        else:
            leaves.discard(node)
        self._record_leaf_set(node, is_leaf)

    # ---------------------------------------------------------------------------------- locks

    def inc_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Locks node and its ancestors; returns the change of evictable_size (<= 0).

        >>> c = RadixCache(); leaf = c.insert([1, 2, 3]).last_node
        >>> c.inc_lock_ref(leaf), c.protected_size(), c.evictable_size()
        (-3, 3, 0)
        """
        if type(node) is not TreeNode or self._nodes.get(node.id) is not node:
            self._check_live(node)  # raises
        self._begin("inc_lock_ref", rid, "node {}", node.id)
        delta = self._lock(node, +1)
        self._end("inc_lock_ref")
        return delta

    def dec_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Releases a lock taken by inc_lock_ref(node); returns the change of evictable_size."""
        if type(node) is not TreeNode or self._nodes.get(node.id) is not node:
            self._check_live(node)  # raises
        root = self.root_node
        if not node.locks_held and node is not root and not self.disable:
            raise ValueError(
                f"dec_lock_ref: node {node.id} holds no lock (lock_ref {node.lock_ref})"
            )
        self._begin("dec_lock_ref", rid, "node {}", node.id)
        delta = self._lock(node, -1)
        self._end("dec_lock_ref")
        return delta

    def _lock(self, node: TreeNode, direction: int) -> int:
        """The lock walk: lock_ref += direction from node up to the root (excluded). A node's
        tokens move from evictable to protected when its lock_ref leaves 0 (and back when it
        returns to 0). Returns the change of evictable_size.

            root -- a(r=0) -- b(r=0) -- c(r=0)    inc_lock_ref(c): c, b, a each become r=1,
            root -- a(r=1) -- b(r=1) -- c(r=1)    and their tokens are protected
        """
        if self.disable or node is self.root_node:
            return 0  # the root's lock_ref stays 1: locking it is a no-op, as in SGLang
        node.locks_held += direction
        start, root, moved_total = node, self.root_node, 0
        edge = 0 if direction > 0 else 1  # the lock_ref at which a node's tokens move
        sink = self._sink
        while node is not root:
            moved = 0
            if node.lock_ref == edge:
                moved = len(node.value)  # == len(node.key); a list's len is cheaper
                moved_total += moved
            node.lock_ref += direction
            if sink is not None:  # one LockChanged a hop
                sink.emit(ev.LockChanged(node.id, node.lock_ref, direction, moved))
            node = node.parent
        if moved_total:
            self.evictable_size_ -= direction * moved_total
            self.protected_size_ += direction * moved_total
        # only the start node can become or stop being a leaf: every node above it has a child
        if start.children:
            return -direction * moved_total
        self._update_leaf_status(start)
        return -direction * moved_total

    # ------------------------------------------------------------------------------- requests
    # The seed chapter's names (cache_finished_req, cache_unfinished_req) and SGLang 0.5.23's
    # (release_kv_cache, checkpoint) run the same code: _checkpoint and _release below.

    def checkpoint(self, req: Req, *, up_to: int) -> None:
        """SGLang 0.5.23's `checkpoint`: cache req's tokens [0, up_to) (page-floored), split at
        the prompt boundary, free the duplicates, point the row at the tree's slots and move
        the lock to the new last node. Frees nothing past the floored key (see _checkpoint).

        >>> from radix.request import SlotAllocator
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], slot_ids=a.alloc(3)); c.checkpoint(r, up_to=3)
        >>> r.cache_protected_len, r.last_node.lock_ref, c.protected_size()
        (3, 1, 3)
        """
        self._begin("checkpoint", req.rid, "{:,} tokens", up_to)
        self._checkpoint(req, up_to)
        self._end("checkpoint")

    def release_kv_cache(self, req: Req, *, checkpoint: bool = True) -> None:
        """SGLang 0.5.23's `release_kv_cache(req, tree_cache, checkpoint=...)`: with checkpoint,
        the request's tokens go into the tree first; then its own slots past the tree-owned
        prefix are freed and its lock is dropped. checkpoint=False (retraction, abort) inserts
        nothing.

        >>> from radix.request import SlotAllocator
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], slot_ids=a.alloc(3)); c.release_kv_cache(r, checkpoint=False)
        >>> c.total_size(), a.available_size()
        (0, 8)
        """
        self._begin("release_kv_cache", req.rid, "{:,} tokens", len(req.slot_ids))
        self._release(req, checkpoint, None)
        self._end("release_kv_cache")

    def cache_finished_req(self, req: Req, is_insert: bool = True,
                           kv_len_to_handle: int | None = None) -> None:
        """A request finished: cache its tokens, free what the tree already had, drop its lock.
        0.5.23's release_kv_cache(checkpoint=is_insert), over the row's first
        `kv_len_to_handle` slots (default: all of req.slot_ids; the KV of the last output
        token was never computed, so the row holds prompt + output - 1). The output is split
        off the prompt, whose nodes get priority + 1, so eviction takes the output first.

        >>> from radix.request import SlotAllocator
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], output_ids=[7, 8], slot_ids=a.alloc(4))
        >>> c.cache_finished_req(r); c.total_size(), a.available_size()
        (4, 4)
        >>> [(len(n.key), n.priority) for n in (c.node(2), c.node(1))]  # prompt, then output
        [(3, 1), (1, 0)]
        """
        self._begin("cache_finished_req", req.rid, "{:,} tokens", len(req.slot_ids))
        self._release(req, is_insert, kv_len_to_handle)
        self._end("cache_finished_req")

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """A request's prompt (or chunk) is computed: 0.5.23's checkpoint(req,
        up_to=len(req.fill_ids)). `chunked` is accepted for the seed chapter's callers and
        changes nothing: req.cache_inserted_len already makes a request count each node's hit
        once (0.5.23 dropped the flag for inserted_len).
        """
        if self.disable:
            # SGLang's ChunkCache: nothing is cached, but the request's own computed slots are
            # its prefix for the next chunk (PrefillAdder.add_chunked_req reads them).
            req.prefix_indices = req.slot_ids[: len(req.fill_ids)]
            return
        self._begin("cache_unfinished_req", req.rid, "{:,} tokens", len(req.fill_ids))
        self._checkpoint(req, len(req.fill_ids))
        self._end("cache_unfinished_req")

    def _checkpoint(self, req: Req, up_to: int) -> None:
        """Inserts req's tokens [0, up_to) page-floored, then the prompt alone with priority + 1
        (so the leaf splits at the prompt boundary), frees the request's slots the tree already
        had, points the row at the tree's slots and moves the lock (unlock old, lock new).
        Follows SGLang 0.5.23's radix_cache.py `checkpoint` / `_insert_cache`; `req.slot_ids`
        plays the request's req_to_token row:

            0 ....... cache_protected_len ....... floor(up_to) .... up_to .... len(row)
            | owned by the tree (locked) | the request's own slots | partial page | over-allocated |

        A 5-token prompt plus 3 output tokens, page 1, nothing cached: the insert makes one node
        of 8, the prompt insert splits it 5 + 3; the prompt node has priority 1, the output 0.
        """
        if self.disable:
            return
        row = req.slot_ids
        if not 0 <= up_to <= len(row):
            raise ValueError(f"request {req.rid!r}: up_to {up_to} is outside 0..{len(row)} "
                             "(the slots it holds)")
        ids = head(req.all_ids, up_to)  # the whole row, shared, when it is all computed
        n = self._aligned(ids)
        key = RadixKey(head(ids, n), req.extra_key, req.cache_salt)
        values = row[:n]
        priority = req.priority or 0
        result = self._insert(key, values, priority, req.cache_inserted_len)
        req.cache_inserted_len = max(req.cache_inserted_len, n)
        # the prompt-boundary split: nothing new is cached, the prompt's nodes rise to priority+1
        prompt_len = self._aligned(ids[: len(req.origin_input_ids)])
        raised = prompt_boundary_priority(prompt_len, n, priority)
        if raised is not None:  # walking up from the insert's node
            self._raise_prompt(result.last_node, n, prompt_len, raised)
        protected = req.cache_protected_len
        self._free(row[protected : result.prefix_len])  # duplicates of what the tree had
        # SGLang matches the key again for the tree's slots and node; the key ends at the first
        # insert's node (a prompt-boundary split only adds a parent above it), so the match
        # walks up from there (the same access times, leaf set and events) and joins only the
        # slots the row takes
        new_last = result.last_node
        if n:
            row[protected:n] = self._rematch_tail(new_last, n, n - protected)
        req.cache_protected_len = n
        if req.last_node is not None:
            self._lock(req.last_node, -1)
        self._lock(new_last, +1)
        req.last_node = new_last
        req.prefix_indices = row[:up_to]

    def _release(self, req: Req, insert: bool, kv_len: int | None) -> None:
        """SGLang 0.5.23's common.py `release_kv_cache`: checkpoint up to the owned length (when
        inserting), free the row's [cache_protected_len, owned) (the unaligned tail, or all the
        request computed when not inserting), unlock, then free the over-allocated rest from
        the next page boundary.

        Page 4, a row of 10 committed slots, nothing cached: the insert takes 8, the tail 8..10
        is freed, then the lock (moved to the new leaf by the checkpoint) is dropped.
        """
        row = req.slot_ids
        owned = len(row) if kv_len is None else kv_len
        if not isinstance(owned, int) or not 0 <= owned <= len(row):
            raise ValueError(f"request {req.rid!r}: kv_len_to_handle {kv_len!r} is outside "
                             f"0..{len(row)} (the slots it holds)")
        if self.disable:
            self._free(row)
            req.last_node = None
            return
        if insert:
            self._checkpoint(req, owned)
        self._free(row[req.cache_protected_len : owned])
        if req.last_node is not None:
            self._lock(req.last_node, -1)
        req.last_node = None
        # subtle: a paged allocator frees the whole page holding `owned - 1` with the tail
        # above, so the over-allocated range starts at the next page boundary (ceil_align)
        ps = getattr(self.allocator, "page_size", 1)
        self._free(row[-(-owned // ps) * ps :])

    def node_start(self, node: TreeNode) -> int:
        """Where node's edge starts in its path: the tokens on the edges above it.

            root -- [1 2 3] -- [4 5] -- [6]     node_start of [6] is 3 + 2 = 5

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); leaf = c.insert([1, 2, 3, 4, 5]).last_node
        >>> c.node_start(leaf), c.node_start(c.root_node)
        (3, 0)
        """
        start, node = 0, node.parent
        while node is not None:
            start += len(node.key)
            node = node.parent
        return start

    # ------------------------------------------------------------------------- sizes, looking

    def evictable_size(self) -> int:
        return self.evictable_size_

    def protected_size(self) -> int:
        """Tokens in locked nodes (in use by running requests)."""
        return self.protected_size_

    def total_size(self) -> int:
        return self.evictable_size_ + self.protected_size_

    @property
    def evictable_leaves(self) -> set[TreeNode]:
        """SGLang's set of unlocked, childless nodes: what evict may take next."""
        return self._leaves.leaves

    def node(self, node_id: int) -> TreeNode:
        """The live node with this id (KeyError when evicted or unknown)."""
        return self._nodes[node_id]

    def snapshot(self) -> TreeSnapshot:
        """The tree as plain immutable data for drawing and comparing: nodes in pre-order,
        siblings sorted by child key (default namespace first, then by first page)."""
        ps = self.page_size
        return TreeSnapshot(tree_states(self.root_node, self._leaves.leaves, ps), ps,
                            self.evictable_size_, self.protected_size_, self.num_steps)

    def pretty_print(self, decode: Callable[[list[int]], str] | None = None,
                     show_hits: bool = False, mark_leaves: bool = False, file=None, *,
                     ids: Callable[[Any], str] | None = None) -> str:
        """Prints (and returns) SGLang's pretty_print lines; see format_tree (`ids`:
        how a node's tokens are shown, e.g. a Mooncake trace's hash ids)."""
        text = format_tree(self.snapshot(), decode, show_hits, mark_leaves, ids=ids)
        print(text, file=file)
        return text

    def check_invariants(self) -> None:
        """Raises InvariantError on the first broken rule: links, child keys, lock counts
        against the locks held, sizes, the leaf set, the eviction heap, live nodes only.

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); c.evictable_size_ = 99
        >>> try:
        ...     c.check_invariants()
        ... except InvariantError as e:
        ...     print(e)
        evictable/protected sizes are 99/0, the tree holds 3/0
        """
        root = self.root_node
        if root.lock_ref != 1:
            raise InvariantError(f"root lock_ref is {root.lock_ref}, expected 1")
        reachable: dict[int, TreeNode] = {}
        leaves: set[TreeNode] = set()
        evictable = protected = 0
        stack = [root]
        fine = self._node_fine
        while stack:
            node = stack.pop()
            reachable[node.id] = node
            n = fine(node, root)
            if n < 0:
                problem = self._node_problem(node)
                if problem is not None:
                    raise InvariantError(f"node {node.id}: {problem}")
                n = len(node.key)
            if node is not root:
                if node.lock_ref == 0:
                    evictable += n
                    if not node.children:
                        leaves.add(node)
                else:
                    protected += n
            stack.extend(node.children.values())
        self._check_totals(reachable, leaves, evictable, protected)

    def _node_fine(self, node: TreeNode, root: TreeNode) -> int:
        """The length of `node`'s key when it keeps every rule of _node_problem (its fast path:
        the check runs every few requests of a long trace); -1 sends it to _node_problem."""
        value, ids = node.value, node.key.token_ids
        n, ps = len(ids), self.page_size
        if value is None or len(value) != n:
            return -1
        held = node.locks_held
        try:  # (an empty child key: _node_problem says what is wrong, or raises, as before)
            for ck, child in node.children.items():
                if child.parent is not node:
                    return -1
                held += child.lock_ref
                key = child.key
                if ps == 1 and key.extra_key is None and key.cache_salt is None:
                    if key.token_ids[0] != ck:  # child_key's plain case, inlined
                        return -1
                elif key.child_key(ps) != ck:
                    return -1
        except (IndexError, ValueError):
            return -1
        if node is not root and (n == 0 or n % ps or node.lock_ref != held):
            return -1
        return n

    def _node_problem(self, node: TreeNode) -> str | None:
        """The first rule `node` breaks, or None (no closure or exception on the happy path)."""
        if node.value is None:
            return "evicted node is reachable"
        n, ps = len(node.key.token_ids), self.page_size
        if len(node.value) != n:
            return f"{len(node.value)} slot ids for a key of {n} tokens"
        if node is not self.root_node:
            if n == 0 or n % ps:
                return f"key length {n} is not a positive multiple of page {ps}"
            expected = node.locks_held + sum(c.lock_ref for c in node.children.values())
            if node.lock_ref != expected:
                return f"lock_ref {node.lock_ref} != locks held here and below ({expected})"
        for ck, child in node.children.items():
            if child.parent is not node:
                return f"child {child.id} does not point back to its parent"
            if child.key.child_key(ps) != ck:
                return f"child {child.id} is filed under {ck!r}, its key says otherwise"
        return None

    def _check_totals(self, reachable, leaves, evictable: int, protected: int) -> None:
        if reachable.keys() != self._nodes.keys():
            extra = sorted(self._nodes.keys() - reachable.keys())[:5]
            raise InvariantError(f"registered nodes not reachable from the root: {extra}")
        if (evictable, protected) != (self.evictable_size_, self.protected_size_):
            raise InvariantError(
                f"evictable/protected sizes are {self.evictable_size_}/{self.protected_size_}, "
                f"the tree holds {evictable}/{protected}"
            )
        if leaves != self._leaves.leaves:
            wrong = sorted(n.id for n in leaves ^ self._leaves.leaves)[:5]
            raise InvariantError(f"evictable leaf set is wrong for nodes {wrong}")
        problem = self._leaves.check()
        if problem:
            raise InvariantError(problem)

    # -------------------------------------------------------------------------------- helpers

    def _aligned(self, key: RadixKey) -> int:
        n = len(key)
        return n if self.page_size == 1 else n // self.page_size * self.page_size

    @staticmethod
    def _as_key(key) -> RadixKey:
        """A RadixKey is trusted as SGLang trusts its callers; a plain sequence is copied and
        checked once (ints only, in C) since it comes straight from a user (who may mutate
        their own list afterwards: a key's list is shared, never copied again)."""
        if isinstance(key, RadixKey):
            return key
        if isinstance(key, str | bytes) or not isinstance(key, Sequence | range):
            raise TypeError(f"expected a RadixKey or a sequence of token ids, "
                            f"got {type(key).__name__}")
        ids = tokens(key) if isinstance(key, TokenRuns) else list(key)
        try:
            array("q", ids)
        except (TypeError, OverflowError):
            raise TypeError("token ids must be ints that fit in 64 bits") from None
        return RadixKey(ids)

    def _check_live(self, node: TreeNode) -> None:
        if not isinstance(node, TreeNode):
            raise TypeError(f"expected a TreeNode, got {type(node).__name__}")
        if self._nodes.get(node.id) is not node:
            raise ValueError(f"node {node.id} is not a live node of this tree (evicted or foreign)")

    def _free(self, slot_ids: Sequence[int]) -> None:
        if self.allocator is not None and len(slot_ids):
            self.allocator.free(slot_ids)

    def _begin(self, op: str, rid: str | None = None, detail: str = "", *args) -> None:
        """Opens a step; `detail` is formatted with `args` only when someone listens."""
        if self._sink is not None:
            self._sink.emit(ev.StepStarted(self.num_steps, op, rid, detail.format(*args)))

    def _end(self, op: str) -> None:
        if self._sink is not None:
            self._sink.emit(ev.StepEnded(self.num_steps, op))
        self.num_steps += 1

    def _emit(self, event: ev.Event) -> None:
        if self._sink is not None:
            self._sink.emit(event)


def _concat_tokens(parts: list) -> Tokens:
    if parts and isinstance(parts[0], TokenRuns):
        return TokenRuns.concat(parts)
    return [t for part in parts for t in part]


def _check_value(value: Sequence[int], length: int) -> Sequence[int]:
    # only slices of it are stored, so a list (or a compact sequence) needs no copy
    if type(value) is not list and not hasattr(value, "concat"):
        value = list(value)
    if len(value) != length:
        raise ValueError(f"value has {len(value)} slot ids for a key of {length} tokens")
    return value


# ------------------------------------------------------------------------------------ the replay
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
