"""The component tree rebuilt from its events: `ComponentTreeModel` (replay.py's TreeModel plus
each node's SWA and Mamba values and lock refs) and `ComponentEventLog` (an EventLog with
keyframes of it), so that a page can draw a UnifiedRadixCache at any step of a long run.

Law (tests/radix/tree/test_unified_replay.py): fed a run's events from an empty cache, the model
ends equal to the cache's `snapshot()` (unified_check.component_snapshot) after every step. What
the events say: FULL's NodeSplit / NodeInserted / LockChanged / LeafSetChanged / NodeEvicted;
ComponentStored, ComponentTombstoned and ComponentLockChanged for SWA and Mamba; a split does
what the components' `on_split` do (SWA: values sliced, the lock copied; Mamba: the upper half
has no state). Leaves out: the LRUs, the SWA window-lock stamps, sizes and pools.
"""

from __future__ import annotations

from collections.abc import Sequence

from radix import events as ev
from radix.tokens import TokenRuns, tokens
from radix.tree.replay import EventLog, TreeModel, _new
from radix.tree.unified_check import ComponentNodeState

AUX = ("swa", "mamba")  # the auxiliary components, in ComponentType order


class ComponentTreeModel(TreeModel):
    """A unified tree rebuilt from events. `aux[node id]` is [swa value, swa lock_ref,
    mamba value, mamba lock_ref] (value None: a tombstone, or the component is off).

    >>> from radix.events import ListSink
    >>> from radix.tree.unified_radix_cache import InsertParams, UnifiedRadixCache
    >>> from radix.tree.key import RadixKey
    >>> sink = ListSink(); c = UnifiedRadixCache(("full", "mamba"), sink=sink)
    >>> _ = c.insert(InsertParams(RadixKey([1, 2, 3]), mamba_value=[7]))
    >>> _ = c.match_prefix([1, 2, 9])  # splits [1, 2] off: the new node has no state
    >>> m = ComponentTreeModel(("mamba",)); m.apply_all(sink.events)
    >>> m.snapshot() == c.snapshot(), [n.mamba_slot_ids for n in m.snapshot()]
    (True, [None, None, (7,)])
    """

    def __init__(self, components: Sequence[str] = AUX, page_size: int = 1) -> None:
        unknown = set(components) - set(AUX)
        if unknown:
            raise ValueError(f"components must be among {AUX}, got {sorted(unknown)}")
        self.components = tuple(c for c in AUX if c in components)
        super().__init__(page_size)

    def reset(self) -> None:
        super().reset()
        on = self.components
        # the root holds a lock of 1 in every component the cache has (UnifiedRadixCache.reset)
        self.aux: dict[int, list] = {0: [None, int("swa" in on), None, int("mamba" in on)]}

    def copy(self) -> ComponentTreeModel:
        out = _new(ComponentTreeModel)
        out.page_size, out.step, out.components = self.page_size, self.step, self.components
        self._copy_nodes_into(out)
        out.aux = {i: list(a) for i, a in self.aux.items()}
        return out

    def snapshot(self) -> tuple[ComponentNodeState, ...]:
        """Every node, pre-order, children in insertion order (component_snapshot's order);
        compact sequences stay compact."""
        out, stack, aux, leaves = [], [self.nodes[0]], self.aux, self.leaves
        while stack:
            node = stack.pop()
            swa, swa_lock, mamba, mamba_lock = aux[node.id]
            parent = node.parent
            out.append(ComponentNodeState(
                node.id, None if parent is None else parent.id, _frozen(node.key.token_ids),
                _frozen(node.value or ()), node.lock_ref, swa, swa_lock, mamba, mamba_lock,
                node in leaves))
            stack.extend(reversed(node.children.values()))
        return tuple(out)


def _frozen(seq: Sequence[int]) -> Sequence[int]:
    if isinstance(seq, TokenRuns):
        return tokens(seq)
    return seq if seq.__class__ is tuple else tuple(seq)


def _split(m: ComponentTreeModel, e: ev.NodeSplit) -> None:
    TreeModel.handlers[ev.NodeSplit](m, e)
    child, k = m.aux[e.node_id], e.split_len
    swa = child[0]
    upper = [None if swa is None else swa[:k], child[1], None, 0]
    if swa is not None:
        child[0] = swa[k:]
    m.aux[e.new_node_id] = upper


def _inserted(m: ComponentTreeModel, e: ev.NodeInserted) -> None:
    TreeModel.handlers[ev.NodeInserted](m, e)
    m.aux[e.node_id] = [None, 0, None, 0]


def _evicted(m: ComponentTreeModel, e: ev.NodeEvicted) -> None:
    TreeModel.handlers[ev.NodeEvicted](m, e)
    del m.aux[e.node_id]


def _stored(m: ComponentTreeModel, e: ev.ComponentStored) -> None:
    m.aux[e.node_id][AUX.index(e.component) * 2] = e.slot_ids
    if e.full_slot_ids is not None:
        m.nodes[e.node_id].value = e.full_slot_ids


def _tombstoned(m: ComponentTreeModel, e: ev.ComponentTombstoned) -> None:
    m.aux[e.node_id][AUX.index(e.component) * 2] = None


def _locked(m: ComponentTreeModel, e: ev.ComponentLockChanged) -> None:
    m.aux[e.node_id][AUX.index(e.component) * 2 + 1] = e.lock_ref


ComponentTreeModel.handlers = {
    **TreeModel.handlers,
    ev.NodeSplit: _split,
    ev.NodeInserted: _inserted,
    ev.NodeEvicted: _evicted,
    ev.ComponentStored: _stored,
    ev.ComponentTombstoned: _tombstoned,
    ev.ComponentLockChanged: _locked,
}


class ComponentEventLog(EventLog):
    """An EventLog of a UnifiedRadixCache: its model and keyframes are ComponentTreeModels,
    so `model_at(step).snapshot()` is the component tree after `step` steps.

    >>> from radix.tree.unified_radix_cache import UnifiedRadixCache
    >>> log = ComponentEventLog(("swa",)); c = UnifiedRadixCache(("full", "swa"),
    ...                                                         sliding_window_size=2, sink=log)
    >>> _ = c.insert([1, 2, 3])  # a leaf capped at one window: [1] over [2, 3]
    >>> _ = c.evict(swa_num_tokens=1)  # SWA's LRU tail [1] is tombstoned, its node stays
    >>> [n.swa_slot_ids for n in log.snapshot_at(1)], [n.swa_slot_ids for n in log.snapshot_at(2)]
    ([None, (1,), (2, 3)], [None, None, (2, 3)])
    >>> log.snapshot_at(2) == c.snapshot()
    True
    """

    def __init__(self, components: Sequence[str] = AUX, keyframe_every: int = 64,
                 page_size: int = 1) -> None:
        super().__init__(keyframe_every, page_size)
        self.model = ComponentTreeModel(components, page_size)
        self._keyframes = [self.model.copy()]

    def model_at(self, step: int) -> ComponentTreeModel:  # (a ComponentTreeModel: its keyframes)
        return super().model_at(step)  # type: ignore[return-value]

    def snapshot_at(self, step: int) -> tuple[ComponentNodeState, ...]:  # type: ignore[override]
        return self.model_at(step).snapshot()
