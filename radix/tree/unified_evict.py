"""Eviction in the unified tree (SGLang 0.5.23's UnifiedRadixCache._evict_components over the
components' device-eviction walks and the TreeCore's cascade): each component in turn evicts
toward its own request or, for an allocation, until its pool can serve the shortfall.

    FULL         pops evictable leaves in policy order; a leaf goes whole (every component)
    SWA, MAMBA   walk their own LRU from the tail past locked entries: an evictable leaf goes
                 whole; inside the tree the component is tombstoned and the cascade takes the
                 lower-priority components on that node (SWA takes MAMBA; MAMBA takes none)

Leaves out: host demotion and write-back backups, session partitions, the shared-pool donor.
"""

from __future__ import annotations

from radix import events as ev
from radix.tree.components.base import FULL, SWA, TreeComponent
from radix.tree.node import detach
from radix.tree.unified_types import EvictResult


def evict_components(cache, requests: dict, targets: dict | None):
    """Runs the walks; returns what each component evicted (an EvictResult)."""
    tracker = dict.fromkeys(cache.tree_components, 0)
    if cache.disable:
        return EvictResult(tracker)
    walked = False  # until a walk runs, no pool has reached its target (each lies above it)
    for comp in cache.comps:
        ct = comp.component_type
        request = requests.get(ct, 0)
        # the pool's availability to reach (evict_for_alloc), None: the request alone
        target = None if targets is None else targets.get(ct)
        to_target = ct == FULL and request > 0 and target is not None
        if not to_target and tracker[ct] >= request:
            continue
        if walked and target is not None and cache.available_size(ct) >= target:
            continue
        quota = max(request, tracker[ct] + cache.evictable_size_[FULL]) if to_target else request
        walked = True
        if ct == FULL:
            _walk_full(cache, quota, tracker, target)
        else:
            _walk_lru(cache, comp, quota, tracker, target)
    return EvictResult(tracker)


def _walk_full(cache, quota: int, tracker: dict, target: int | None) -> None:
    heap = cache._leaves
    while tracker[FULL] < quota:
        node = heap.pop()
        if node is None:
            break
        delete_leaf(cache, node, tracker)
        if target is not None and cache.available_size(FULL) >= target:
            break


def _walk_lru(cache, comp: TreeComponent, quota: int, tracker: dict,
              target: int | None) -> None:
    """The component's walk from its LRU tail: the cursor moves to the previous unlocked entry
    before each victim goes, and restarts at the tail when its entry left the list."""
    lru, ct = comp.lru, comp.component_type
    cursor = lru.lru_no_lock()
    while True:
        if cursor is not None and cursor.next is None:
            cursor = lru.lru_no_lock()
        if cursor is None or tracker[ct] >= quota:
            return
        node = cursor.node
        cursor = lru.prev_no_lock(cursor)
        if node in cache.evictable_leaves:
            delete_leaf(cache, node, tracker)
        else:
            comp.evict_component(node, tracker)
            cascade(cache, node, comp, tracker)
        if target is not None and cache.available_size(ct) >= target:
            return


def cascade(cache, node, trigger: TreeComponent, tracker: dict) -> None:
    """After `trigger` left `node`, every component of priority at most its own goes too
    (SGLang's _cascade_evict): inside the tree SWA takes MAMBA (a state is useless where the
    window is gone). A lock on a lower component here would strand it: an error."""
    is_leaf = node in cache.evictable_leaves
    top = trigger.eviction_priority(is_leaf)
    for comp in cache.comps:
        if comp is trigger or comp.eviction_priority(is_leaf) > top or not comp.has_data(node):
            continue
        locked = comp.lock_ref(node)
        if locked and comp.internal_priority >= trigger.internal_priority:
            continue
        if locked or comp.component_type == FULL:
            raise AssertionError(f"cascade from {trigger.component_type} would take a locked "
                                 f"or FULL {comp.component_type} on node {node.id}")
        comp.evict_component(node, tracker, cause="cascade")
    cache.update_leaf(node)


def delete_leaf(cache, node, tracker: dict) -> None:
    """An evictable leaf goes whole: FULL's slots (full pool), SWA's peers, the state; the
    parent may become an evictable leaf in the same call. Where SWA holds the leaf's peers,
    both pools get theirs back in one free (the allocator's free: SWA's, then FULL's)."""
    slot_ids = node.value
    data = node.component_data
    both = cache._frees_swa_peers and data[SWA].value is not None
    cache.full.evict_component(node, tracker, not both)
    for comp in cache.aux:
        comp.evict_component(node, tracker, "", not both or comp.component_type != SWA)
    if both:
        cache.allocator.free(slot_ids)
    for t in cache._aux_types:  # its data lets go of it (the one reference cycle a node is
        data[t].node = None     # in), so the node is freed at once, not by the cycle collector
    key = node.key
    if cache.page_size == 1 and key.extra_key is None and key.cache_salt is None:
        parent = node.parent  # (detach, inline)
        del parent.children[key.token_ids[0]]
    else:
        parent = detach(node, cache.page_size)
    del cache._nodes[node.id]
    cache._leaves.discard(node)
    node.value = None
    if cache._sink is not None:
        cache._sink.emit(ev.LeafSetChanged((), (node.id,)))
        cache._sink.emit(ev.NodeEvicted(node.id, parent.id, len(slot_ids), tuple(slot_ids),
                                        node.heap_key))
    if not parent.children or parent in cache.evictable_leaves:  # (else: still no leaf)
        cache.update_leaf(parent)
