"""The components of SGLang 0.5.23's unified tree: FULL (the path), SWA (a sliding window's KV,
tombstoned outside it), MAMBA (one recurrent state per node). `radix/tree/unified_radix_cache.py`
drives them through the hooks of `TreeComponent`."""

from radix.tree.components.base import (
    FULL,
    MAMBA,
    SWA,
    ComponentData,
    ComponentType,
    LockReceipt,
    LRUList,
    TreeComponent,
    parse_component,
)
from radix.tree.components.full import FullComponent
from radix.tree.components.mamba import MambaComponent
from radix.tree.components.req_state import ReqKvInfo
from radix.tree.components.swa import SWAComponent, free_swa_out_of_window_slots

__all__ = ["FULL", "SWA", "MAMBA", "ComponentType", "ComponentData", "LockReceipt", "LRUList",
           "TreeComponent", "parse_component", "FullComponent", "SWAComponent",
           "MambaComponent", "ReqKvInfo", "free_swa_out_of_window_slots"]
