"""The rules a radix tree keeps, checked: InvariantError names the node and the rule it breaks.

`check_tree(cache)` is RadixCache.check_invariants (its body lives here, apart from the cache's
calls): links and child keys, lock counts against the locks held, sizes, the leaf set, the
eviction heap, live nodes only. `edge_problem` is the part every tree here checks the same
way (RadixCache, the host tier's HostTierCache): whole pages, children linked back and filed
under their own keys. A check walks every node, so callers run it every few ops, not after each
(radix/runs/ops.py). Leaves out: the allocator's own books (radix/request.py checks those).
"""

from __future__ import annotations

from typing import Any

from radix.tree.node import TreeNode
from radix.tree.snapshot import Inspectable


class InvariantError(AssertionError):
    """A broken invariant of a cache; the message names the node and the rule."""


def check_invariants(cache: Inspectable) -> None:
    """Raises InvariantError on the first broken rule of a RadixCache (its check_invariants:
    links, child keys, lock counts against the locks held, sizes, the leaf set, the heap).

    >>> from radix.tree.radix_cache import RadixCache
    >>> c = RadixCache(); _ = c.insert([1, 2, 3]); c.evictable_size_ = 99
    >>> check_invariants(c)
    Traceback (most recent call last):
    ...
    radix.tree.invariants.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
    """
    cache.check_invariants()


def edge_problem(node: Any, page_size: int) -> str | None:
    """The first rule of its edge and links that `node` breaks, or None: an edge below the root
    is a positive whole number of pages; each child points back to the node and is filed under
    its own child key.

    >>> from radix.tree.key import RadixKey
    >>> root, a = TreeNode(0, RadixKey([]), [], 0.0), TreeNode(1, RadixKey([5, 6, 7]), None, 0.0)
    >>> root.children[5] = a; edge_problem(root, 1)  # a.parent was never set
    'child 1 does not point back to its parent'
    >>> a.parent = root; edge_problem(root, 1), edge_problem(a, 2)
    (None, 'key length 3 is not a positive multiple of page 2')
    """
    n = len(node.key.token_ids)
    if node.parent is not None and (n == 0 or n % page_size):
        return f"key length {n} is not a positive multiple of page {page_size}"
    for ck, child in node.children.items():
        if child.parent is not node:
            return f"child {child.id} does not point back to its parent"
        if child.key.child_key(page_size) != ck:
            return f"child {child.id} is filed under {ck!r}, its key says otherwise"
    return None


def check_tree(cache: Any) -> None:
    """RadixCache.check_invariants: a stack walk from the root, each node through a fast path
    (`_node_fine`) and, when that finds anything off, the rule it breaks (`_node_problem`);
    then the totals against the cache's registry, sizes, leaf set and heap."""
    root = cache.root_node
    if root.lock_ref != 1:
        raise InvariantError(f"root lock_ref is {root.lock_ref}, expected 1")
    reachable: dict[int, TreeNode] = {}
    leaves: set[TreeNode] = set()
    evictable = protected = 0
    stack = [root]
    ps = cache.page_size
    while stack:
        node = stack.pop()
        reachable[node.id] = node
        n = _node_fine(node, root, ps)
        if n < 0:
            problem = _node_problem(node, root, ps)
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
    _check_totals(cache, reachable, leaves, evictable, protected)


def _node_fine(node: TreeNode, root: TreeNode, ps: int) -> int:
    """The length of `node`'s key when it keeps every rule of _node_problem (its fast path:
    the check runs every few requests of a long trace); -1 sends it to _node_problem."""
    value, ids = node.value, node.key.token_ids
    n = len(ids)
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


def _node_problem(node: TreeNode, root: TreeNode, ps: int) -> str | None:
    """The first rule `node` breaks, or None (no closure or exception on the happy path)."""
    if node.value is None:
        return "evicted node is reachable"
    n = len(node.key.token_ids)
    if len(node.value) != n:
        return f"{len(node.value)} slot ids for a key of {n} tokens"
    if node is not root:
        if n == 0 or n % ps:
            return f"key length {n} is not a positive multiple of page {ps}"
        expected = node.locks_held + sum(c.lock_ref for c in node.children.values())
        if node.lock_ref != expected:
            return f"lock_ref {node.lock_ref} != locks held here and below ({expected})"
    return edge_problem(node, ps)


def _check_totals(cache: Any, reachable, leaves, evictable: int, protected: int) -> None:
    nodes, heap = cache._nodes, cache._leaves
    if reachable.keys() != nodes.keys():
        extra = sorted(nodes.keys() - reachable.keys())[:5]
        raise InvariantError(f"registered nodes not reachable from the root: {extra}")
    if (evictable, protected) != (cache.evictable_size_, cache.protected_size_):
        raise InvariantError(
            f"evictable/protected sizes are {cache.evictable_size_}/{cache.protected_size_}, "
            f"the tree holds {evictable}/{protected}"
        )
    if leaves != heap.leaves:
        wrong = sorted(n.id for n in leaves ^ heap.leaves)[:5]
        raise InvariantError(f"evictable leaf set is wrong for nodes {wrong}")
    problem = heap.check()
    if problem:
        raise InvariantError(problem)
