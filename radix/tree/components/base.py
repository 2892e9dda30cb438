"""What every component of the unified tree shares (SGLang 0.5.23's unified_cache/components/
base.py, unified_tree_core.py's UnifiedLRUList): the component types, a node's per-component
data (value or tombstone, lock_ref, the window-lock boundary uuid, LRU links), the per-component
LRU list, the lock receipt, and `TreeComponent`, the hooks a component answers.

A component's value on a node is None when it is a tombstone: the node stays (FULL keeps the
path), the component's data is gone. Leaves out: host values and host LRUs (HiCache), session
refs, storage and linker hooks, C128 and the auxiliary SWA component.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any, NamedTuple

from radix import events as ev


class ComponentType(IntEnum):
    """SGLang's ComponentType: an int, so a node's data list is indexed by it.

    >>> ComponentType.SWA, int(ComponentType.MAMBA)
    (<ComponentType.SWA: 1>, 2)
    """

    FULL = 0
    SWA = 1
    MAMBA = 2

    def __str__(self) -> str:
        return self.name.lower()


FULL, SWA, MAMBA = ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA


def parse_component(x: ComponentType | int | str) -> ComponentType:
    """A ComponentType from itself, its int, or its name in any case.

    >>> parse_component("swa"), parse_component(2)
    (<ComponentType.SWA: 1>, <ComponentType.MAMBA: 2>)
    """
    if isinstance(x, str):
        try:
            return ComponentType[x.upper()]
        except KeyError:
            raise ValueError(f"unknown component {x!r}; choose full, swa or mamba") from None
    return ComponentType(x)


class ComponentData:
    """One auxiliary component's data on one node (FULL keeps its own on the node: `value`,
    `lock_ref`). `value` holds pool slot ids (SWA: one per token; Mamba: one state slot), None
    for a tombstone; `uuid` marks the node where an SWA window lock stopped."""

    __slots__ = ("node", "value", "lock_ref", "uuid", "prev", "next")

    def __init__(self, node: Any) -> None:
        self.node = node  # the tree node this data belongs to (None for an LRU sentinel)
        self.value: list[int] | None = None  # slot ids, or None: a tombstone
        self.lock_ref = 0  # requests holding this component's data here
        self.uuid: int | None = None  # SWA: the boundary of a window lock ending here
        self.prev: ComponentData | None = None  # LRU links (toward the MRU head)
        self.next: ComponentData | None = None  # (toward the LRU tail); None: not listed


class LRUList:
    """A component's doubly linked LRU over its data: the head is most recently used, eviction
    walks from the tail past locked entries (SGLang's UnifiedLRUList without sessions).

    >>> class N: pass
    >>> lru = LRUList(); a, b = ComponentData(N()), ComponentData(N())
    >>> lru.insert_mru(a); lru.insert_mru(b); lru.lru_no_lock() is a
    True
    >>> a.lock_ref = 1; lru.lru_no_lock() is b  # a locked entry is passed over
    True
    """

    def __init__(self) -> None:
        self.head, self.tail = ComponentData(None), ComponentData(None)
        self.head.lock_ref = self.tail.lock_ref = 1
        self.head.next, self.tail.prev = self.tail, self.head
        self.size = 0

    def _link_after(self, prev: ComponentData, cd: ComponentData) -> None:
        nxt = prev.next
        cd.prev, cd.next = prev, nxt
        nxt.prev = prev.next = cd

    def _unlink(self, cd: ComponentData) -> None:
        cd.prev.next, cd.next.prev = cd.next, cd.prev
        cd.prev = cd.next = None

    def insert_mru(self, cd: ComponentData) -> None:
        assert cd.next is None, "already listed"
        self._link_after(self.head, cd)
        self.size += 1

    def insert_after(self, prev: ComponentData, cd: ComponentData) -> None:
        """`cd` just behind `prev` (a split's new upper half beside its lower half)."""
        assert cd.next is None and prev.next is not None
        self._link_after(prev, cd)
        self.size += 1

    def remove(self, cd: ComponentData) -> None:
        assert cd.next is not None, "not listed"
        self._unlink(cd)
        self.size -= 1

    def reset_mru(self, cd: ComponentData) -> None:
        self._unlink(cd)
        self._link_after(self.head, cd)

    def reset_path_mru(self, path: list[ComponentData]) -> None:
        """Moves `path` (deepest first) to the head in that order: the deepest ends most
        recent, its ancestors right behind it (reset_node_and_parents_mru)."""
        prev = self.head
        for cd in path:
            self.place_after(prev, cd)
            prev = cd

    @staticmethod
    def place_after(prev: ComponentData, cd: ComponentData) -> None:
        """Moves `cd` (in the list) right behind `prev`; an entry already there stays."""
        if cd.prev is not prev:
            cd.prev.next, cd.next.prev = cd.next, cd.prev
            nxt = prev.next
            cd.prev, cd.next = prev, nxt
            nxt.prev = prev.next = cd

    def prev_no_lock(self, cd: ComponentData) -> ComponentData | None:
        """The first unlocked entry toward the head from `cd`, or None at the head."""
        x = cd.prev
        while x.lock_ref > 0:
            if x is self.head:
                return None
            x = x.prev
        return x

    def lru_no_lock(self) -> ComponentData | None:
        return self.prev_no_lock(self.tail)

    def entries(self) -> list[ComponentData]:
        """MRU first (for checks and snapshots)."""
        out, x = [], self.head.next
        while x is not self.tail:
            out.append(x)
            x = x.next
        return out


class LockReceipt(NamedTuple):
    """What inc_lock_ref took, replayed by the matching release (SGLang's IncLockRefResult /
    DecLockRefParams): the anchor node, the components left unlocked, and the SWA window
    boundary (None when the window lock reached the root)."""

    node_id: int
    skipped: tuple[ComponentType, ...] = ()
    swa_uuid: int | None = None


class TreeComponent:
    """The hooks the unified tree calls on each component; the defaults are what a component
    without an opinion does (SGLang's TreeComponent). Subclasses set `component_type`."""

    component_type: ComponentType
    internal_priority = 0  # cascade order on an internal node: FULL 2 > SWA 1 > MAMBA 0

    def __init__(self, cache: Any) -> None:  # the UnifiedRadixCache it serves
        self.cache = cache
        self.lru = LRUList()
        # a value counts its length (size_of not overridden): read inline, no call
        self._sized_by_len = type(self).size_of is TreeComponent.size_of

    # -- data on a node
    def data(self, node) -> ComponentData:
        return node.component_data[self.component_type]

    def has_data(self, node) -> bool:
        return node.component_data[self.component_type].value is not None

    def lock_ref(self, node) -> int:
        return node.component_data[self.component_type].lock_ref

    def eviction_priority(self, is_leaf: bool) -> int:
        """Evicting a component on a node cascades to every other one with a priority at most
        its own: on a leaf all are 0 (the node goes), inside FULL 2 > SWA 1 > MAMBA 0."""
        return 0 if is_leaf else self.internal_priority

    # -- match
    def validator(self) -> Callable[[Any], bool]:
        raise NotImplementedError

    def finalize_match(self, result: Any) -> Any:
        return result

    def refresh_match_end(self, node) -> None: ...

    # -- split, insert
    def on_split(self, new, child) -> None: ...

    def insert_overlap(self, node, prefix_len: int, total: int, value, params, result) -> int:
        return prefix_len

    def commit_insert(self, node, is_new_leaf: bool, params, result) -> None: ...

    def refresh_insert_end(self, node) -> None: ...

    def set_value(self, node, value: list[int], recovered: bool = False) -> None:
        """Stores this component's value on a tombstone: listed most recent, counted
        protected when the node is locked (SGLang's set_component_device_value)."""
        cd = node.component_data[self.component_type]
        cd.value = value
        lru = self.lru  # (LRUList.insert_mru)
        assert cd.next is None, "already listed"
        head = lru.head
        nxt = head.next
        cd.prev, cd.next = head, nxt
        nxt.prev = head.next = cd
        lru.size += 1
        cache, ct = self.cache, self.component_type
        sizes = cache.protected_size_ if cd.lock_ref else cache.evictable_size_
        sizes[ct] += len(value) if self._sized_by_len else self.size_of(value)
        if cache._sink is not None:
            full = tuple(node.value) if recovered else None
            cache._sink.emit(ev.ComponentStored(node.id, str(ct), tuple(value), recovered, full))

    def size_of(self, value: list[int]) -> int:
        """What a value counts in this component's sizes (tokens; Mamba: 1 state)."""
        return len(value)

    # -- evict
    def evict_component(self, node, tracker: dict, cause: str = "evict",
                        free: bool = True) -> int:
        """Frees this component's data on `node` (a tombstone now, unless the node is being
        deleted), unlisted; adds what it freed to tracker. Returns that amount. free=False:
        the pool gets it back from the caller (a deleted leaf's SWA peers, with FULL's)."""
        cd = node.component_data[self.component_type]
        if cd.value is None:
            return 0
        value = cd.value
        n = len(value) if self._sized_by_len else self.size_of(value)
        if free:
            self.free_value(node, value)
        cd.value = None
        assert cd.next is not None, "not listed"  # (LRUList.remove)
        cd.prev.next, cd.next.prev = cd.next, cd.prev
        cd.prev = cd.next = None
        self.lru.size -= 1
        cache, ct = self.cache, self.component_type
        cache.evictable_size_[ct] -= n
        tracker[ct] += n
        if cache._sink is not None and cause:
            cache._sink.emit(ev.ComponentTombstoned(node.id, str(ct), n, cause))
        return n

    def free_value(self, node, value: list[int]) -> None:
        raise NotImplementedError

    # -- locks
    def acquire(self, node, receipt: LockReceipt) -> LockReceipt:
        raise NotImplementedError

    def release(self, node, receipt: LockReceipt) -> None:
        raise NotImplementedError

    # -- a request's caching (checkpoint / release)
    def prepare_for_caching_req(self, state, params, token_ids_len: int,
                                is_finished: bool) -> int | None:
        return None

    def free_out_of_window_slots(self, req, state, pre_len: int, params) -> None: ...

    def cleanup_after_caching_req(self, state, is_finished: bool, result=None,
                                  params=None) -> None: ...
