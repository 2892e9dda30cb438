"""A node of the two-tier tree and the results of the host-tier cache's calls.

Follows SGLang 0.5.23's UnifiedTreeNode with the FULL component only
(unified_cache/unified_tree_core.py and components/full.py): `value` holds device KV slots
(None once demoted: "evicted"), `host_value` host slots (None until backed up: "backuped" is
host_value is not None). A node is device-only, on both tiers, or host-only; a dead node
(neither) is never kept. `host_anchor` marks the node where a host lock's segment ends (SGLang
keeps a uuid in the component's metadata; a split moves it to the new upper node).
Leaves out: SWA/Mamba component data, hash values, pending-DMA marks (transfers here are
synchronous), session refs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radix.tree.key import RadixKey
from radix.tree.node import TreeNode


class HostNode(TreeNode):
    """One edge of the two-tier radix tree: a TreeNode (radix/tree/node.py: its key, links and
    device slots `value`, split and linked by the tree's own functions) with a host copy."""

    __slots__ = ("host_value", "host_lock_ref", "host_anchor")

    def __init__(self, node_id: int, key: RadixKey, value: list[int] | None, time: float,
                 priority: int = 0) -> None:
        super().__init__(node_id, key, value, time)  # value: device slots; None: host-only
        self.priority = priority
        self.host_value: list[int] | None = None  # host slots; None until backed up
        self.host_lock_ref = 0
        self.host_anchor = 0  # > 0: a host lock's segment ends here (its receipt id)

    @property
    def backuped(self) -> bool:
        """Has a host copy (SGLang's `node.backuped`)."""
        return self.host_value is not None

    @property
    def tier(self) -> str:
        """"device", "both" or "host": where this node's KV lives."""
        if self.value is None:
            return "host"
        return "device" if self.host_value is None else "both"

    def __repr__(self) -> str:
        return f"HostNode(id={self.id}, len={len(self.key)}, tier={self.tier})"


class HostMatch(NamedTuple):
    """match_prefix in HiCache mode. `device_prefix_len` tokens are on the device (their slots
    in `slot_ids`, ending at `last_device_node`); `host_hit_length` more lie on host-only
    nodes down to `best_match_node`, loadable with load_back."""

    slot_ids: Sequence[int]
    device_prefix_len: int
    host_hit_length: int
    last_device_node: HostNode
    best_match_node: HostNode


class HostInsert(NamedTuple):
    prefix_len: int  # tokens of the key already in the tree (device or host)
    last_node: HostNode
    adopted: int  # of those, tokens on host-only nodes that took the key's own slots


class TierCounts(NamedTuple):
    """Tokens moved by the tier machinery since the cache was made."""

    backed_up: int  # device -> host copies
    demoted: int  # device copies freed, host copy kept
    loaded_back: int  # host -> device copies
    host_evicted: int  # host copies freed with their (host-only) node
    reclaimed: int  # write-back: host copies of nodes still on the device, freed
    dropped_unbacked: int  # device KV lost: write-through, not yet backed up
    dropped_host_pressure: int  # device KV lost: write-back, the host could not take it
