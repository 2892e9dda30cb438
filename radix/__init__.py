"""RadixLens's model of LLM prefix caches: pure Python, deterministic, no torch, no streamlit.

`RadixCache` follows SGLang's radix tree (mem_cache/radix_cache.py), `UnifiedRadixCache` its
tree with FULL, SWA and MAMBA components (hybrid models); `BlockPool` and `BlockCacheManager`
follow vLLM v1's block-hash prefix cache, `KVCacheManager` its hybrid cache (KV-cache groups of
a `ModelPreset`, radix/models/); `SchedulePolicy`, `PrefillAdder`
and `Scheduler` follow SGLang's scheduler; `simulate` runs a trace through all of them with a
cost model. Every mutation is emitted as an event (`radix.events`). The names below are the
public API, listed in docs/CONTRACTS.md (a test keeps the two in step).
"""

from radix import events
from radix.blocks.hashing import (
    HASH_ALGOS,
    NONE_HASH,
    VLLM_NONE_HASH_SEED,
    BlockHasher,
    hash_block_tokens,
    hash_request_tokens,
)
from radix.blocks.hybrid_coordinator import HybridKVCacheCoordinator
from radix.blocks.hybrid_pool import HybridBlock, HybridBlockPool
from radix.blocks.hybrid_specs import (
    FullAttentionSpec,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from radix.blocks.kv_cache_manager import HybridHit, HybridLookup, KVCacheManager
from radix.blocks.kv_events import (
    EventBatch,
    batch_from_json,
    batch_to_json,
    decode_batch,
    encode_batch,
)
from radix.blocks.manager import (
    BlockCacheManager,
    ComputedBlocks,
    ExtentPool,
    LookupRecord,
    UnsupportedByStorage,
)
from radix.blocks.pool import BlockPool, FreeKVCacheBlockQueue, KVCacheBlock
from radix.blocks.snapshot import BlockPoolSnapshot, BlockState, take_snapshot
from radix.cluster import ROUTERS as CLUSTER_ROUTERS
from radix.cluster import Decision, Load, RouteRequest, make_router
from radix.cluster.sim import ClusterResult, simulate_cluster
from radix.events import EventSink, ListSink
from radix.hosttier import HostTierCache, TierCounts, host_token_capacity
from radix.hosttier.replay import TierRun, compare_host_tiers
from radix.models import PRESETS as MODEL_PRESETS
from radix.models import ModelPreset, VllmLayout, VllmOptions, load_preset, vllm_layout
from radix.request import Allocator, Req, SlotAllocator
from radix.runs.compare import compare
from radix.runs.costs import CostModel
from radix.runs.ops import replay_ops
from radix.runs.recording import RecordingMatch, match_recording
from radix.runs.sim import SimConfig, SimResult, simulate
from radix.sched.admission import PrefillAdder
from radix.sched.policy import SchedulePolicy
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.tokens import Tokens
from radix.traces import Trace, TraceError, TraceRequest, load_trace
from radix.tree import hybrid_lifecycle
from radix.tree.components import (
    ComponentData,
    ComponentType,
    FullComponent,
    LockReceipt,
    MambaComponent,
    ReqKvInfo,
    SWAComponent,
    TreeComponent,
)
from radix.tree.evict_policy import POLICIES as EVICTION_POLICIES
from radix.tree.hybrid_args import (
    HybridServerArgs,
    HybridShape,
    PoolSizes,
    build_hybrid_cache,
    pool_sizes,
)
from radix.tree.hybrid_lifecycle import SchedulerKnobs
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator
from radix.tree.invariants import InvariantError, check_invariants
from radix.tree.key import RadixKey
from radix.tree.node import TreeNode
from radix.tree.radix_cache import LogicalClock, RadixCache
from radix.tree.replay import EventLog, TreeModel
from radix.tree.results import EvictResult, InsertResult, MatchResult
from radix.tree.snapshot import NodeState, TreeSnapshot, format_tree, snapshot
from radix.tree.unified_check import ComponentNodeState
from radix.tree.unified_radix_cache import UnifiedRadixCache, UnifiedTreeNode
from radix.tree.unified_types import HybridMatchResult, InsertParams

__all__ = [
    # the radix tree (SGLang)
    "RadixKey", "TreeNode", "RadixCache", "LogicalClock", "MatchResult", "InsertResult",
    "EvictResult", "EVICTION_POLICIES", "TreeSnapshot", "NodeState", "snapshot", "format_tree",
    "check_invariants", "InvariantError", "TreeModel", "EventLog",
    # the unified tree with components (SGLang's UnifiedRadixCache: hybrid models)
    "UnifiedRadixCache", "UnifiedTreeNode", "InsertParams", "HybridMatchResult", "ComponentType",
    "ComponentData", "TreeComponent", "FullComponent", "SWAComponent", "MambaComponent",
    "LockReceipt", "ReqKvInfo", "ComponentNodeState", "SWASlotAllocator", "MambaSlotPool",
    "HybridShape", "HybridServerArgs", "PoolSizes", "pool_sizes", "build_hybrid_cache",
    "SchedulerKnobs", "hybrid_lifecycle",
    # the block cache (vLLM)
    "BlockPool", "KVCacheBlock", "FreeKVCacheBlockQueue", "BlockCacheManager", "ComputedBlocks",
    "ExtentPool", "UnsupportedByStorage", "LookupRecord", "hash_block_tokens",
    "hash_request_tokens", "NONE_HASH", "BlockPoolSnapshot", "BlockState",
    "take_snapshot", "EventBatch", "encode_batch", "decode_batch",
    "batch_to_json", "batch_from_json", "BlockHasher", "HASH_ALGOS", "VLLM_NONE_HASH_SEED",
    # the hybrid block cache (vLLM 0.33's hybrid coordinator) and model presets
    "KVCacheManager", "HybridKVCacheCoordinator", "HybridBlockPool", "HybridBlock", "HybridHit",
    "HybridLookup", "KVCacheGroupSpec", "FullAttentionSpec", "SlidingWindowSpec", "MambaSpec",
    "ModelPreset", "MODEL_PRESETS", "load_preset", "VllmOptions", "VllmLayout", "vllm_layout",
    # requests, slots, scheduling; the one token sequence
    "Req", "Allocator", "SlotAllocator", "SchedulePolicy", "PrefillAdder", "Scheduler",
    "SchedulerConfig", "Tokens",
    # events
    "events", "EventSink", "ListSink",
    # traces and runs
    "Trace", "TraceRequest", "TraceError", "load_trace", "compare", "simulate", "SimConfig",
    "SimResult", "CostModel", "replay_ops", "match_recording", "RecordingMatch",
    # the cluster (radix/cluster/)
    "CLUSTER_ROUTERS", "make_router", "RouteRequest", "Load", "Decision", "simulate_cluster",
    "ClusterResult",
    # the host tier (radix/hosttier/)
    "HostTierCache", "TierCounts", "host_token_capacity", "compare_host_tiers", "TierRun",
]
