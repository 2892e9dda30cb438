"""The host tier (SGLang 0.5.23's HiCache over UnifiedRadixCache, FULL component): a second,
larger pool of host tokens behind the device pool. Device eviction demotes backed-up nodes to
host instead of losing them; a later match finds them and `load_back` copies them back.

`HostTierCache` (cache.py, moves.py) is the model; `host_token_capacity` sizes the host pool as
--hicache-ratio / --hicache-size do; `serve_request` (requests.py) runs one request's lifecycle
and splits its prompt into device hit, host hit (loaded back) and miss.
"""

from radix.hosttier.cache import HostTierCache
from radix.hosttier.capacity import (
    LOAD_BACK_THRESHOLD,
    WRITE_POLICIES,
    HostPool,
    host_token_capacity,
    write_through_threshold,
)
from radix.hosttier.node import HostInsert, HostMatch, HostNode, TierCounts

__all__ = ["HostTierCache", "HostNode", "HostMatch", "HostInsert", "TierCounts", "HostPool",
           "host_token_capacity", "write_through_threshold", "WRITE_POLICIES",
           "LOAD_BACK_THRESHOLD"]
