"""The cluster: N replicas behind a router (routers one file each, the multi-replica
simulator, the sweep). `make_router(name, n)` builds any of ROUTERS; the simulator
(radix.cluster.sim) and `engine serve --dp N` (engine/cluster.py) use the same classes.
"""

from __future__ import annotations

from typing import Any

from radix.cluster.base import REASONS, Decision, Load, RouteRequest, block_keys, failover
from radix.cluster.cache_aware import CacheAware, CacheAwareConfig
from radix.cluster.kv_overlap import EventIndex, KeyIndex, KvOverlap, KvOverlapConfig
from radix.cluster.prefix_affinity import PrefixAffinity, PrefixAffinityConfig
from radix.cluster.simple import LeastLoad, PowerOfTwo, RandomRouter, RoundRobin, SessionRouter

ROUTERS = ("round-robin", "random", "least-load", "power-of-two", "session", "cache-aware",
           "kv-overlap", "prefix-affinity")

__all__ = ["REASONS", "ROUTERS", "CacheAware", "CacheAwareConfig", "Decision", "EventIndex",
           "KeyIndex", "KvOverlap", "KvOverlapConfig", "LeastLoad", "Load", "PowerOfTwo",
           "PrefixAffinity", "PrefixAffinityConfig", "RandomRouter", "RoundRobin",
           "RouteRequest", "SessionRouter", "block_keys", "failover", "make_router"]


def make_router(name: str, num_replicas: int, *, block_size: int = 16, seed: int = 0,
                index: Any = None, config: Any = None) -> Any:
    """The router called `name` over `num_replicas` replicas, with its documented defaults.
    `block_size`: tokens per block key of the routed prompts (the approximate trees);
    `index`: kv-overlap's block index (default: a KeyIndex, fed by the simulator);
    `config`: a CacheAwareConfig, PrefixAffinityConfig or KvOverlapConfig for that router
    (its block_size wins over `block_size`).

    >>> make_router("least-load", 2).name
    'least-load'
    """
    if num_replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {num_replicas}")
    if name == "round-robin":
        return RoundRobin(num_replicas)
    if name == "random":
        return RandomRouter(num_replicas, seed)
    if name == "least-load":
        return LeastLoad(num_replicas)
    if name == "power-of-two":
        return PowerOfTwo(num_replicas, seed)
    if name == "session":
        return SessionRouter(num_replicas)
    if name == "cache-aware":
        return CacheAware(num_replicas, config or CacheAwareConfig(block_size=block_size))
    if name == "kv-overlap":
        return KvOverlap(num_replicas, index if index is not None
                         else KeyIndex(num_replicas, block_size), config, seed=seed)
    if name == "prefix-affinity":
        return PrefixAffinity(num_replicas, config or PrefixAffinityConfig(block_size=block_size),
                              seed=seed)
    raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {name!r}")
