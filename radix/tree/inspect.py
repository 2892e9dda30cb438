"""Looking at a tree, as plain functions: snapshot, SGLang-style pretty_print, check_invariants.

`format_tree` prints a TreeSnapshot the way SGLang's RadixCache.pretty_print does: a stack walk
from the root, one line per node (indent, edge length, first ten token ids, `r=lock_ref`), then
`#tokens: N`; options add hit counts, evictable-leaf marks and decoded text.
`check_invariants` really checks: links, child keys, lock counts against the locks held,
evictable + protected == total, the leaf set, the eviction heap, no evicted node reachable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from radix.tokens import frozen
from radix.tree.node import NodeState, TreeNode, TreeSnapshot


class InvariantError(AssertionError):
    """A broken invariant of a cache; the message names the node and the rule."""


def _node_state(node: TreeNode, evictable: bool) -> NodeState:
    return NodeState(
        id=node.id,
        parent=None if node.parent is None else node.parent.id,
        token_ids=frozen(node.key.token_ids),
        slot_ids=tuple(node.value),
        lock_ref=node.lock_ref,
        hit_count=node.hit_count,
        last_access_time=node.last_access_time,
        creation_time=node.creation_time,
        priority=node.priority,
        evictable_leaf=evictable,
        extra_key=node.key.extra_key,
        cache_salt=node.key.cache_salt,
        child_ids=tuple(c.id for c in node.children.values()),
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


def snapshot(cache: Any) -> TreeSnapshot:
    """A RadixCache as plain immutable data: nodes in pre-order, siblings sorted by child key."""
    out: list[NodeState] = []
    leaves, ps = cache.evictable_leaves, cache.page_size

    def order(n: TreeNode):
        k = n.key
        return child_sort_key(tuple(k.token_ids[:ps]), k.extra_key, k.cache_salt, ps)

    stack = [cache.root_node]
    while stack:
        node = stack.pop()
        out.append(_node_state(node, node in leaves))
        stack.extend(sorted(node.children.values(), key=order, reverse=True))
    return TreeSnapshot(tuple(out), ps, cache.evictable_size_, cache.protected_size_,
                        cache.num_steps)


def check_invariants(cache: Any) -> None:
    """Raises InvariantError on the first broken rule of a RadixCache: links, child keys, lock
    counts against the locks held, sizes, the leaf set, the eviction heap, live nodes only.

    >>> from radix.tree.radix_cache import RadixCache
    >>> c = RadixCache(); _ = c.insert([1, 2, 3]); c.evictable_size_ = 99
    >>> check_invariants(c)
    Traceback (most recent call last):
    ...
    radix.tree.inspect.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
    """
    root, ps = cache.root_node, cache.page_size
    if root.lock_ref != 1:
        raise InvariantError(f"root lock_ref is {root.lock_ref}, expected 1")
    reachable: dict[int, TreeNode] = {}
    leaves: set[TreeNode] = set()
    evictable = protected = 0
    stack = [root]
    while stack:
        node = stack.pop()
        reachable[node.id] = node
        _check_node(cache, node, ps)
        if node is not root:
            if node.lock_ref == 0:
                evictable += len(node.key)
                if not node.children:
                    leaves.add(node)
            else:
                protected += len(node.key)
        stack.extend(node.children.values())
    _check_totals(cache, reachable, leaves, evictable, protected)


def _check_node(cache: Any, node: TreeNode, ps: int) -> None:
    problem = _node_problem(cache, node, ps)
    if problem is not None:
        raise InvariantError(f"node {node.id}: {problem}")


def _node_problem(cache: Any, node: TreeNode, ps: int) -> str | None:
    """The first rule `node` breaks, or None (no closure or exception on the happy path)."""
    if node.value is None:
        return "evicted node is reachable"
    n = len(node.key.token_ids)
    if len(node.value) != n:
        return f"{len(node.value)} slot ids for a key of {n} tokens"
    if node is not cache.root_node:
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


def _check_totals(cache: Any, reachable, leaves, evictable: int, protected: int) -> None:
    if reachable.keys() != cache._nodes.keys():
        extra = sorted(cache._nodes.keys() - reachable.keys())[:5]
        raise InvariantError(f"registered nodes not reachable from the root: {extra}")
    if (evictable, protected) != (cache.evictable_size_, cache.protected_size_):
        raise InvariantError(
            f"evictable/protected sizes are {cache.evictable_size_}/{cache.protected_size_}, "
            f"the tree holds {evictable}/{protected}"
        )
    if leaves != cache.evictable_leaves:
        wrong = sorted(n.id for n in leaves ^ cache.evictable_leaves)[:5]
        raise InvariantError(f"evictable leaf set is wrong for nodes {wrong}")
    problem = cache._leaves.check()
    if problem:
        raise InvariantError(problem)
