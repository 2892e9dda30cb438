"""The tree as plain immutable data (TreeSnapshot of NodeStates) and SGLang's pretty_print.

`tree_states` is the one snapshot walk (pre-order, siblings sorted by child key), run by
RadixCache.snapshot and by the replay model (radix/tree/replay.py), so a replay is compared
with a cache as data; `format_tree` prints a snapshot as SGLang's RadixCache.pretty_print does
(mem_cache/radix_cache.py). Drawing code reads snapshots only, never a live cache.
Leaves out: SGLang's pretty_print of its host and mamba values.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import NamedTuple, Protocol

from radix.tokens import TokenRuns, tokens
from radix.tree.node import TreeNode


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


class Inspectable(Protocol):
    """What `snapshot` and `check_invariants` (invariants.py) need of a cache (RadixCache has
    both)."""

    def snapshot(self) -> TreeSnapshot: ...

    def check_invariants(self) -> None: ...


def tree_states(root: TreeNode, leaves: Container[TreeNode],
                page_size: int) -> tuple[NodeState, ...]:
    """The tree under `root` as NodeStates, pre-order, siblings sorted by child key (default
    namespace first, then by first page); `leaves` holds the evictable leaves. The one snapshot
    walk: RadixCache.snapshot and the replay model's (`TreeModel`, replay.py) both run it."""
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
