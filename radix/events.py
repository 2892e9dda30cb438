"""Events: what a cache did, as small frozen dataclasses named in the past tense.

Every public call on a cache is one *step*: it opens with `StepStarted`, closes with `StepEnded`,
and the micro-events in between (a split, a new leaf, each hop of a lock walk, each leaf popped by
`evict`) are what the UI animates. A cache built without a sink emits nothing and builds no event
objects at all (each emit site is guarded by `if self._sink is not None`).
Leaves out: the vLLM wire format of block events (see `radix/kv_events.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class TeeSink:
    """Sends each event to several sinks."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink.emit(event)


# --- radix tree micro-events (radix/tree.py) ---------------------------------------------------


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
    """An insert walked these nodes: hit_count += 1 on each (not for chunked inserts), and each
    node's priority became max(priority, the insert's priority)."""

    node_ids: tuple[int, ...]
    priority: int
    counted: bool  # False for chunked inserts: priorities still rise, hit counts do not


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
class CacheReset(Event):
    """reset(): the tree is empty again."""
