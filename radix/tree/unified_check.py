"""Looking at a unified tree: its invariant check and a plain-data snapshot per component
(for drawing and comparing). Follows SGLang 0.5.23's UnifiedTreeCore.sanity_check where it
applies without HiCache; leaves out host values, sessions and the pools' own accounting.
"""

from __future__ import annotations

from typing import NamedTuple

from radix.tree.components.base import FULL, MAMBA, SWA
from radix.tree.invariants import InvariantError


class ComponentNodeState(NamedTuple):
    """One node as plain data: FULL's slots and lock, and per auxiliary component its slots
    (None: a tombstone, or the component is off) and lock."""

    id: int
    parent: int | None
    token_ids: tuple[int, ...]
    slot_ids: tuple[int, ...]  # FULL
    lock_ref: int  # FULL
    swa_slot_ids: tuple[int, ...] | None
    swa_lock_ref: int
    mamba_slot_ids: tuple[int, ...] | None
    mamba_lock_ref: int
    evictable_leaf: bool


def component_snapshot(cache) -> tuple[ComponentNodeState, ...]:
    """Every node, pre-order, children in insertion order.

    >>> from radix.tree.unified_radix_cache import UnifiedRadixCache
    >>> c = UnifiedRadixCache(("full", "swa"), sliding_window_size=2)
    >>> _ = c.insert([1, 2, 3]); [(n.slot_ids, n.swa_slot_ids) for n in component_snapshot(c)]
    [((), None), ((1,), (1,)), ((2, 3), (2, 3))]
    """
    out, stack = [], [cache.root_node]
    while stack:
        node = stack.pop()
        out.append(_state(cache, node))
        stack.extend(reversed(node.children.values()))
    return tuple(out)


def _state(cache, node) -> ComponentNodeState:
    def comp(ct):
        if ct not in cache.components:
            return None, 0
        cd = node.component_data[ct]
        return (None if cd.value is None else tuple(cd.value)), cd.lock_ref

    swa, mamba = comp(SWA), comp(MAMBA)
    parent = node.parent
    return ComponentNodeState(node.id, None if parent is None else parent.id,
                              tuple(node.key.token_ids), tuple(node.value or ()),
                              node.lock_ref, swa[0], swa[1], mamba[0], mamba[1],
                              node in cache.evictable_leaves)


def check_invariants(cache) -> None:
    """Raises InvariantError on the first broken rule: links and child keys, key and value
    lengths, lock counts (a node holds at least its children's), each component's LRU
    (listed iff it has data), its evictable/protected sizes, the evictable-leaf set."""
    root = cache.root_node
    if root.lock_ref != 1 or any(c.data(root).lock_ref != 1 for c in cache.aux):
        raise InvariantError("a root lock_ref is not 1")
    sizes = {ct: [0, 0] for ct in cache.tree_components}
    leaves, seen, stack = set(), {}, [root]
    while stack:
        node = stack.pop()
        seen[node.id] = node
        problem = _node_problem(cache, node, sizes)
        if problem:
            raise InvariantError(f"node {node.id}: {problem}")
        if node is not root and not node.children and node.lock_ref == 0 and not any(
                c.data(node).lock_ref for c in cache.aux):
            leaves.add(node)
        stack.extend(node.children.values())
    if seen.keys() != cache._nodes.keys():
        raise InvariantError("registered nodes and reachable nodes differ")
    for ct, (ev, pr) in sizes.items():
        if (ev, pr) != (cache.evictable_size_[ct], cache.protected_size_[ct]):
            raise InvariantError(f"{ct} evictable/protected are {cache.evictable_size_[ct]}/"
                                 f"{cache.protected_size_[ct]}, the tree holds {ev}/{pr}")
    if leaves != cache.evictable_leaves:
        wrong = sorted(n.id for n in leaves ^ cache.evictable_leaves)[:5]
        raise InvariantError(f"evictable leaf set is wrong for nodes {wrong}")
    problem = cache._leaves.check()
    if problem:
        raise InvariantError(problem)
    for comp in cache.aux:
        listed = comp.lru.entries()
        if len(listed) != comp.lru.size or any(cd.node.id not in seen for cd in listed):
            raise InvariantError(f"{comp.component_type} LRU lists a node not in the tree")


def _node_problem(cache, node, sizes: dict) -> str | None:
    ps, n = cache.page_size, len(node.key)
    if node is not cache.root_node:
        if node.value is None or len(node.value) != n or n == 0 or n % ps:
            return f"FULL value/key lengths ({len(node.value or ())}, {n}) are wrong"
        held = sum(c.lock_ref for c in node.children.values())
        if node.lock_ref < held:
            return f"FULL lock_ref {node.lock_ref} < its children's {held}"
        sizes[FULL][node.lock_ref > 0] += n
    for ck, child in node.children.items():
        if child.parent is not node or child.key.child_key(ps) != ck:
            return f"child {child.id} is misfiled or does not point back"
    if node is cache.root_node:
        return None
    for comp in cache.aux:
        cd = comp.data(node)
        if cd.lock_ref < 0:
            return f"{comp.component_type} lock_ref {cd.lock_ref}"
        if (cd.value is not None) != (cd.next is not None):
            return f"{comp.component_type} data and LRU membership disagree"
        if cd.value is not None:
            want = 1 if comp.component_type == MAMBA else n
            if len(cd.value) != want:
                return f"{comp.component_type} holds {len(cd.value)} slots, not {want}"
            sizes[comp.component_type][cd.lock_ref > 0] += comp.size_of(cd.value)
    return None
