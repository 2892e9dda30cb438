"""Rebuilding the two-tier tree's shape and residency from HostTierCache's events alone.

`TierModel.apply(event)` keeps, per live node, (parent id, tokens, on device, on host), from
NodeInserted, NodeSplit and the tier events (radix.events: KVBackedUp, NodeDemoted,
DeviceLeafDropped, HostLeafEvicted, HostCopyReclaimed, KVLoadedBack, DeviceRestored).
tests/radix/hosttier/test_hosttier.py holds it equal to the cache after every request of random
runs, so every tier move is an event. Leaves out: locks, hit counts and times (the tree's own
TreeModel, radix/tree/replay.py, rebuilds those for RadixCache).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from radix import events as ev


class Residency(NamedTuple):
    parent: int
    num_tokens: int
    device: bool
    host: bool


class TierModel:
    """node id -> Residency, the root left out.

    >>> m = TierModel(); m.apply(ev.NodeInserted(1, 0, (5, 6), (1, 2), 0, 1.0))
    >>> m.apply(ev.NodeDemoted(1, 2, (1, 2))); m.nodes[1]
    Residency(parent=0, num_tokens=2, device=False, host=False)
    """

    def __init__(self) -> None:
        self.nodes: dict[int, Residency] = {}

    def apply_all(self, events: Iterable[ev.Event]) -> None:
        for e in events:
            self.apply(e)

    def apply(self, e: ev.Event) -> None:
        n = self.nodes
        if isinstance(e, ev.NodeInserted):
            n[e.node_id] = Residency(e.parent_id, len(e.token_ids), True, False)
        elif isinstance(e, ev.NodeSplit):
            child = n[e.node_id]
            n[e.new_node_id] = child._replace(num_tokens=e.split_len)
            n[e.node_id] = child._replace(parent=e.new_node_id,
                                          num_tokens=child.num_tokens - e.split_len)
        elif isinstance(e, ev.KVBackedUp):
            n[e.node_id] = n[e.node_id]._replace(host=True)
        elif isinstance(e, ev.HostCopyReclaimed):
            n[e.node_id] = n[e.node_id]._replace(host=False)
        elif isinstance(e, ev.NodeDemoted):
            n[e.node_id] = n[e.node_id]._replace(device=False)
        elif isinstance(e, ev.DeviceRestored):
            n[e.node_id] = n[e.node_id]._replace(device=True)
        elif isinstance(e, ev.KVLoadedBack):
            for i in e.node_ids:
                n[i] = n[i]._replace(device=True)
        elif isinstance(e, ev.DeviceLeafDropped | ev.HostLeafEvicted):
            del n[e.node_id]
