"""Looking at a tree: SGLang-style pretty_print of a snapshot, and the function forms of
RadixCache.snapshot and RadixCache.check_invariants (the walks live in the cache itself).

`format_tree` prints a TreeSnapshot the way SGLang's RadixCache.pretty_print does: a stack walk
from the root, one line per node (indent, edge length, first ten token ids, `r=lock_ref`), then
`#tokens: N`; options add hit counts, evictable-leaf marks and decoded text.
Leaves out: nothing of a cache's private state is read here.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Protocol

from radix.tokens import frozen
from radix.tree.node import NodeState, TreeNode, TreeSnapshot


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
    walk: RadixCache.snapshot and the replay model's (radix/tree/eventlog.py) both run it."""
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
    """SGLang's pretty_print lines for a snapshot. `ids` renders a node's tokens in place of
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
    radix.tree.inspect.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
    """
    cache.check_invariants()
