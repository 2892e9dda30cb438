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
