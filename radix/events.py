"""Events: what a cache did, as small frozen dataclasses named in the past tense.

Every public call on a cache is one *step*: it opens with `StepStarted`, closes with `StepEnded`,
and the micro-events in between (a split, a new leaf, each hop of a lock walk, each leaf popped by
`evict`) are what the UI animates. A cache built without a sink emits nothing and builds no event
objects at all (each emit site is guarded by `if self._sink is not None`).
One module for every event of radix/: the tree's, the block cache's (vLLM's own BlockStored,
BlockRemoved, AllBlocksCleared among them) and scheduling's. Leaves out: the msgpack wire format
of vLLM's events (radix/blocks/kv_events.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""


@dataclass(frozen=True, slots=True)
class StepStarted(Event):
    step: int  # 0-based index of the public call on this cache
    op: str  # the public method, e.g. "insert", "match_prefix", "cache_finished_req"
    rid: str | None = None  # request id when the call is about one request
    detail: str = ""  # short human text: "key of 2,151 tokens"


@dataclass(frozen=True, slots=True)
class StepEnded(Event):
    step: int
    op: str


class EventSink(Protocol):
    """Anything with `emit`. A list's `append` bound method works: `ListSink`."""

    def emit(self, event: Event) -> None: ...


class ListSink:
    """Collects every event in order; for tests and small runs.

    >>> sink = ListSink(); sink.emit(StepEnded(0, "insert")); len(sink.events)
    1
    """

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)


class StepEmitter:
    """A cache's steps as events: `_begin` and `_end` bracket one public call (StepStarted,
    StepEnded, then the step counter moves on), `_emit` sends one event; all three do nothing
    without a sink. The host needs `_sink` (an EventSink or None) and `num_steps`.

    >>> class Tiny(StepEmitter):
    ...     def __init__(self, sink): self._sink, self.num_steps = sink, 0
    >>> t = Tiny(ListSink()); t._begin("insert", "r1", "key of {} tokens", 3); t._end("insert")
    >>> [type(e).__name__ for e in t._sink.events], t._sink.events[0].detail, t.num_steps
    (['StepStarted', 'StepEnded'], 'key of 3 tokens', 1)
    """

    _sink: EventSink | None
    num_steps: int

    def _begin(self, op: str, rid: str | None = None, detail: str = "", *args: Any) -> None:
        """Opens a step; `detail` is formatted with `args` only when someone listens."""
        if self._sink is not None:
            self._sink.emit(StepStarted(self.num_steps, op, rid,
                                        detail.format(*args) if args else detail))

    def _end(self, op: str) -> None:
        if self._sink is not None:
            self._sink.emit(StepEnded(self.num_steps, op))
        self.num_steps += 1

    def _emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink.emit(event)


# --- the radix tree (radix/tree/) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodesTouched(Event):
    """One access time written to every node a match or insert entered (root first)."""

    node_ids: tuple[int, ...]
    time: float


@dataclass(frozen=True, slots=True)
class NodeSplit(Event):
    """`node_id`'s edge was cut after `split_len` tokens: `new_node_id` is the new prefix node
    (parent side), `node_id` keeps the suffix and becomes its only child."""

    node_id: int
    new_node_id: int
    parent_id: int
    split_len: int
    time: float
    creation_time: float | None = None  # the new node's, when not `time` (unified: the child's)


@dataclass(frozen=True, slots=True)
class NodeInserted(Event):
    """A new leaf for the part of an inserted key that was not cached."""

    node_id: int
    parent_id: int
    token_ids: tuple[int, ...]
    slot_ids: tuple[int, ...]
    priority: int
    time: float
    extra_key: str | None = None  # the key's namespace
    cache_salt: str | None = None


@dataclass(frozen=True, slots=True)
class HitCounted(Event):
    """An insert walked these nodes: each node's priority became max(priority, the insert's
    priority), and hit_count += 1 on node_ids[first_counted:] when counted (SGLang 0.5.23: only
    nodes ending past what the request inserted before, its `inserted_len`, count a hit)."""

    node_ids: tuple[int, ...]
    priority: int
    counted: bool  # False when no node counts a hit (a chunked insert, or all inserted before)
    first_counted: int = 0  # index in node_ids of the first node that counts a hit


@dataclass(frozen=True, slots=True)
class PrefixMatched(Event):
    """A match_prefix result: the nodes of the matched path (root excluded)."""

    node_ids: tuple[int, ...]
    key_len: int  # length of the key asked for, after page alignment
    prefix_len: int


@dataclass(frozen=True, slots=True)
class LockChanged(Event):
    """One hop of an inc_lock_ref / dec_lock_ref walk to the root."""

    node_id: int
    lock_ref: int  # the value after this hop
    delta: int  # +1 or -1
    size_moved: int  # tokens moved between evictable and protected at this hop (0 if none)


@dataclass(frozen=True, slots=True)
class LeafSetChanged(Event):
    """The set of evictable leaves changed."""

    added: tuple[int, ...]
    removed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeEvicted(Event):
    """evict() popped this leaf (in policy order) and freed its slots."""

    node_id: int
    parent_id: int
    num_tokens: int
    slot_ids: tuple[int, ...]
    sort_key: tuple | float | int


@dataclass(frozen=True, slots=True)
class KeyInserted(Event):
    """A key went into the tree (RadixCache's kv_sink only, as SGLang's BlockStored: no step).
    `token_ids` is the key's own sequence, shared, never mutated."""

    token_ids: Any  # Sequence[int] (list or TokenRuns)
    namespace: Any  # None, or (extra_key, cache_salt)


@dataclass(frozen=True, slots=True)
class LeafEvicted(Event):
    """A leaf left the tree (RadixCache's kv_sink only, as SGLang's BlockRemoved)."""

    node_id: int
    token_ids: Any  # the whole path from the root to the leaf's end
    namespace: Any  # None, or (extra_key, cache_salt)
    num_tokens: int  # the leaf's own tokens (the path's last num_tokens)


@dataclass(frozen=True, slots=True)
class CacheReset(Event):
    """reset(): the tree is empty again."""


# --- the host tier (radix/hosttier/): SGLang 0.5.23's HiCache over the unified cache ----------


@dataclass(frozen=True, slots=True)
class KVBackedUp(Event):
    """A device node's KV was copied to host slots (write-through at insert, write-back just
    before a demotion): the node now has both copies."""

    node_id: int
    num_tokens: int
    host_slot_ids: tuple[int, ...]
    reason: str  # "write_through" | "write_back"


@dataclass(frozen=True, slots=True)
class NodeDemoted(Event):
    """Device eviction kept a backed-up node as host-only: its device slots were freed."""

    node_id: int
    num_tokens: int
    slot_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DeviceLeafDropped(Event):
    """Device eviction deleted a node that had no host copy (its KV is lost): reason
    "write_through_unbacked" (not yet hit enough) or "host_pressure" (write-back, host full)."""

    node_id: int
    parent_id: int
    num_tokens: int
    reason: str


@dataclass(frozen=True, slots=True)
class DeviceRestored(Event):
    """An insert walked onto a host-only node and gave it the request's freshly computed
    device slots (SGLang's _unevict_node_on_insert): the node is on both tiers again."""

    node_id: int
    num_tokens: int
    slot_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HostLeafEvicted(Event):
    """Host eviction deleted a host-only leaf and freed its host slots."""

    node_id: int
    parent_id: int
    num_tokens: int


@dataclass(frozen=True, slots=True)
class HostCopyReclaimed(Event):
    """Write-back host eviction freed the host copy of a node still on the device (SGLang's
    _reclaim_full_host_duplicates): the node is device-only again."""

    node_id: int
    num_tokens: int


@dataclass(frozen=True, slots=True)
class KVLoadedBack(Event):
    """A host hit was loaded back: these host-only nodes (root side first) got device slots."""

    node_ids: tuple[int, ...]
    num_tokens: int
    slot_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HostLockChanged(Event):
    """A host lock was taken (+1) or released (-1) on node_id (the anchor of its segment)."""

    node_id: int
    host_lock_ref: int  # the value after the change
    delta: int


# --- the unified tree's components (radix/tree/unified_radix_cache.py, components/) ------------
# SGLang 0.5.23's UnifiedRadixCache with FULL + SWA + MAMBA: FULL keeps the tree's own events
# (NodeSplit, NodeInserted, LockChanged, NodeEvicted, ...); these say what the auxiliary
# components did on a node. `component` is "swa" or "mamba".


@dataclass(frozen=True, slots=True)
class ComponentStored(Event):
    """A component's value was set on a node: an SWA window published or recovered from a
    tombstone, a Mamba state checkpointed there."""

    node_id: int
    component: str
    slot_ids: tuple[int, ...]  # SWA: its pool's slots, one per token; Mamba: the state slot
    recovered: bool = False  # SWA: the node was a tombstone inside the insert's window
    # SWA recovery: the node's FULL slots after it (on an unlocked node the request's own
    # replaced them), so that a replay (radix/tree/unified_replay.py) keeps them; else None
    full_slot_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ComponentTombstoned(Event):
    """A component's data left a node that stays (its value is now None, a tombstone):
    evicted from the component's LRU, cascaded from a higher-priority one, or over the Mamba
    path cap."""

    node_id: int
    component: str
    num_slots: int
    cause: str  # "evict", "cascade" or "path_cap"


@dataclass(frozen=True, slots=True)
class ComponentLockChanged(Event):
    """One hop of an auxiliary component's lock walk (SWA: up to its window boundary;
    Mamba: the node itself)."""

    node_id: int
    component: str
    lock_ref: int  # after this hop
    delta: int
    size_moved: int  # slots moved between evictable and protected here


@dataclass(frozen=True, slots=True)
class HybridPrefixMatched(Event):
    """A match where every component's validator had to accept: FULL matched
    `full_kv_hit_length`, the hit is `prefix_len` (at the deepest node all accepted)."""

    node_ids: tuple[int, ...]  # the hit's path, root excluded
    key_len: int
    prefix_len: int
    full_kv_hit_length: int
    mamba_branching_seqlen: int | None
    swa_branching_seqlen: int | None


@dataclass(frozen=True, slots=True)
class MambaStateCopied(Event):
    """Copy-on-write on match: the request's own state slot starts from the node's state."""

    node_id: int
    src_slot: int
    dst_slot: int


@dataclass(frozen=True, slots=True)
class SlidingWindowFreed(Event):
    """A running request freed its SWA slots for positions [start, end): out of its window."""

    rid: str | None
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class MambaStateTracked(Event):
    """A running request kept a Mamba state at `seqlen` tokens (a checkpoint it may donate)."""

    rid: str | None
    seqlen: int
    slot: int


# --- vLLM's KV cache events (vllm/distributed/kv_events.py), emitted by BlockPool -----------------


@dataclass(frozen=True, slots=True)
class BlockStored(Event):
    block_hashes: tuple[int, ...]  # the new full blocks, in chain order
    parent_block_hash: int | None  # hash of the block before the first one; None at the start
    token_ids: tuple[int, ...]  # len(block_hashes) * block_size tokens
    block_size: int
    lora_id: int | None  # deprecated in vLLM (use lora_name); we have no LoRA ids: None
    medium: str | None  # "GPU"
    lora_name: str | None
    extra_keys: tuple[tuple[Any, ...] | None, ...] | None = None  # one entry per block
    group_idx: int | None = None  # KV cache group; 0 for a single full-attention group
    kv_cache_spec_kind: str | None = None  # "full_attention"
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None  # "LOCAL" | "REMOTE" relative to the publisher (vLLM 0.33)
    ownership: str | None = None  # an offloading tier's identifier
    session_id: str | None = None  # the session whose request stored the blocks
    lookahead_token_ids: tuple[tuple[int, ...], ...] | None = None  # per block, when hashed


@dataclass(frozen=True, slots=True)
class BlockRemoved(Event):
    block_hashes: tuple[int, ...]  # one per event in vLLM; hashes may be bytes when recorded so
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared(Event):
    pass


# --- block pool micro-events (radix/blocks/pool.py) -----------------------------------------------


@dataclass(frozen=True, slots=True)
class BlockAllocated(Event):
    block_ids: tuple[int, ...]  # popped from the free queue's head, in order (ref_cnt now 1)


@dataclass(frozen=True, slots=True)
class BlockTouched(Event):
    block_ids: tuple[int, ...]  # cache hits, in chain order
    ref_cnts: tuple[int, ...]  # each block's ref_cnt after the touch


@dataclass(frozen=True, slots=True)
class BlockFreed(Event):
    block_ids: tuple[int, ...]  # released, in the order given (a request's blocks reversed)
    ref_cnts: tuple[int, ...]  # after the release; 0 means it went back to the free queue
    to_front: tuple[int, ...]  # no hash: prepended (reused first)
    to_tail: tuple[int, ...]  # hashed: appended (kept cached longest)


# --- the block cache manager (radix/blocks/manager.py) --------------------------------------------


@dataclass(frozen=True, slots=True)
class PrefixLookedUp(Event):
    rid: str
    hit_blocks: int
    hit_tokens: int
    stop_block: int
    reason: str  # see LookupRecord


# --- schedule policies (radix/sched/policy.py) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestRanked(Event):
    """One waiting request as a cache-aware sort saw it."""

    rid: str
    prefix_len: int  # cached match, capped at input_len - 1 (SGLang's num_matched_prefix_tokens)
    in_batch_len: int | None  # match in this round's throwaway tree; None: not checked
    deprioritized: bool  # sorted last this round
    reason: str  # why (or why not), in words


@dataclass(frozen=True, slots=True)
class PolicyFellBack(Event):
    """LPM turned itself into FCFS because the queue is long (SGLang does this silently)."""

    policy: str
    fallback: str
    queue_len: int
    limit: int
    notice: str


@dataclass(frozen=True, slots=True)
class QueueSorted(Event):
    """The waiting queue before and after one sort."""

    policy: str  # as configured
    active_policy: str  # what actually ran (differs after a fallback)
    order_before: tuple[str, ...]  # rids
    order_after: tuple[str, ...]
    deprioritized: tuple[str, ...]


# --- admission and retraction (radix/sched/admission.py) ------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestAdmitted(Event):
    rid: str
    prefix_len: int  # tokens reused from the tree
    extend_len: int  # tokens to prefill this round
    chunked: bool  # the prompt continues in a later round
    rem_input_tokens: int  # round budget left after this request


@dataclass(frozen=True, slots=True)
class AdmissionStopped(Event):
    rid: str  # the first request not admitted
    result: str  # AddReqResult value
    reason: str


@dataclass(frozen=True, slots=True)
class RequestRetracted(Event):
    rid: str
    freed_slots: int  # KV slots of its own returned to the pool (its suffix is not inserted)
    output_len: int  # tokens generated so far; kept, re-prefilled on readmission
    reason: str

