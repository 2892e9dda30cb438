"""The live tree: a copy of the engine's radix tree rebuilt from its events, as they happen.

`LiveTree` is the `listener` of an `engine.service.EngineService`: the engine thread hands it every
stamped event; tree events are applied to a `radix.tree.replay.TreeModel` (the replay law makes it
equal to the engine's tree), and the interesting ones are narrated (viz/narrate.py). The page
reads `snapshot()` and `lines()` at any time without waiting for the engine thread to finish a
forward (`EngineService.snapshot()` would). `live_dot` draws it folded (viz/dot.py), so many
conversations under one system prompt stay readable. Leaves out: block-cache events.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from radix import events as ev
from radix.events import RequestAdmitted, RequestRetracted
from radix.tree.node import TreeSnapshot
from radix.tree.replay import TreeModel
from viz.dot import Decode, fold_tree, tree_to_dot
from viz.narrate import narrate

# PrefixMatched is left out: the scheduler matches every waiting request on every round (LPM
# sorting, admission); "admitted" lines carry the numbers that count.
NARRATED = (ev.NodeSplit, ev.NodeInserted, ev.NodeEvicted)
SCHEDULER = "the scheduler's match"  # who acts in a step without a request id


def narrate_scheduler(e: Any) -> str | None:
    """A line for the scheduler events the live page shows, else None.

    >>> narrate_scheduler(RequestAdmitted("req-2", 300, 12, False, 4000))
    'req-2 admitted: 300 tokens from the tree, 12 to prefill'
    """
    if isinstance(e, RequestAdmitted):
        more = " (chunked: more next round)" if e.chunked else ""
        return (f"{e.rid} admitted: {e.prefix_len:,} tokens from the tree, "
                f"{e.extend_len:,} to prefill{more}")
    if isinstance(e, RequestRetracted):
        return f"{e.rid} retracted ({e.reason}): {e.freed_slots:,} slots back to the pool"
    return None


class LiveTree:
    """Thread-safe: `__call__` runs on the engine thread, the readers on the page's.

    `lines()` are (wall time, text), newest last, at most `max_lines` kept.
    """

    def __init__(self, max_lines: int = 200) -> None:
        self._lock = threading.Lock()
        self._model = TreeModel()
        self._owners: dict[int, str] = {}
        self._lines: deque[tuple[float, str]] = deque(maxlen=max_lines)
        self._admitted: dict[str, tuple[int, int]] = {}  # rid -> (matched, to prefill), first
        self.num_events = 0  # tree events applied so far

    def __call__(self, stamped: Any) -> None:
        """Takes one `StampedEvent(rid, wall_time, source, event)`."""
        e = stamped.event
        with self._lock:
            if stamped.source == "tree":
                self._on_tree(e, stamped.rid, stamped.wall_time)
            elif stamped.source == "scheduler":
                if isinstance(e, RequestAdmitted):
                    self._admitted.setdefault(e.rid, (e.prefix_len, e.extend_len))
                line = narrate_scheduler(e)
                if line:
                    self._lines.append((stamped.wall_time, line))

    def _on_tree(self, e: ev.Event, rid: str | None, wall: float) -> None:
        self.num_events += 1
        if isinstance(e, NARRATED):
            line = narrate(e, self._model, self._owners, rid or SCHEDULER)
            self._lines.append((wall, line))
        if isinstance(e, ev.NodeInserted) and rid:
            self._owners[e.node_id] = rid
        elif isinstance(e, ev.NodeSplit) and e.node_id in self._owners:
            self._owners[e.new_node_id] = self._owners[e.node_id]
        self._model.apply(e)

    def snapshot(self) -> TreeSnapshot:
        with self._lock:
            return self._model.snapshot()

    def lines(self, n: int = 10) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._lines)[-n:] if n > 0 else []

    def admitted(self) -> dict[str, tuple[int, int]]:
        """rid -> (tokens matched, tokens to prefill) at its first admission, before it ends."""
        with self._lock:
            return dict(self._admitted)

    def owners(self) -> dict[int, str]:
        with self._lock:
            return dict(self._owners)


def format_lines(lines: list[tuple[float, str]], now: float | None = None) -> list[str]:
    """Lines with their age: `(100.0, "x")` at now=102.5 reads `"2.5 s ago: x"`."""
    now = time.time() if now is None else now
    return [f"{max(now - t, 0.0):.1f} s ago: {text}" for t, text in lines]


def live_dot(snapshot: TreeSnapshot, decode: Decode | None, selected: int | None,
             max_children: int = 12) -> tuple[str, int, int]:
    """(DOT, nodes drawn, nodes folded): at most `max_children` children per node, the selected
    node (outlined) and locked ones (running requests) first. A root with 20 leaves, 12 per
    node: 1 + 12 drawn, 8 folded into one "+8 more" box."""
    highlight = {selected: "selected"} if selected is not None else None
    plan = fold_tree(snapshot, max_children, None, [selected] if selected is not None else [])
    dot = tree_to_dot(snapshot, decode=decode, highlight=highlight, max_children=max_children)
    return dot, len(plan.drawn), len(snapshot.nodes) - len(plan.drawn)
