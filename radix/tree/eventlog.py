"""EventLog: a sink that keeps every step of a radix cache and can show the tree at any step.

Events are grouped into steps (one public call each). The log keeps its own TreeModel, rebuilt
from the events as they arrive (so the replay law is exercised on every run), and copies it into
a keyframe every `keyframe_every` steps; the tree at step k is the nearest keyframe at or before k
plus the events after it. Scrubbing costs O(tree + keyframe_every * events per step).
Leaves out: persistence (see `to_jsonl` for a text dump of the events).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Iterator

from radix import events as ev
from radix.tree.node import TreeSnapshot
from radix.tree.replay import TreeModel


class EventLog:
    """Collects a cache's events by step.

    >>> from radix.tree.radix_cache import RadixCache
    >>> log = EventLog(); c = RadixCache(sink=log)
    >>> _ = c.insert([1, 2, 3]); _ = c.insert([1, 2, 4])
    >>> log.num_steps, log.steps[2][0].op, log.snapshot_at(2).total_size
    (3, 'insert', 3)
    """

    def __init__(self, keyframe_every: int = 64, page_size: int = 1) -> None:
        if keyframe_every < 1:
            raise ValueError(f"keyframe_every must be >= 1, got {keyframe_every}")
        self.keyframe_every = keyframe_every
        self.steps: list[list[ev.Event]] = []  # closed steps, each StepStarted ... StepEnded
        self._open: list[ev.Event] = []
        self._depth = 0
        self.model = TreeModel(page_size)
        self._keyframe_steps: list[int] = [0]
        self._keyframes: list[TreeModel] = [self.model.copy()]

    # ------------------------------------------------------------------------------ recording

    def emit(self, event: ev.Event) -> None:
        self._open.append(event)
        model, kind = self.model, type(event)
        handler = model.handlers.get(kind)  # model.apply, without a call (the hot path)
        if handler is not None:
            handler(model, event)
        if kind is ev.StepStarted:
            self._depth += 1
        elif kind is ev.StepEnded:
            self._depth -= 1
            if self._depth == 0:
                self._close_step()

    def _close_step(self) -> None:
        self.steps.append(self._open)
        self._open = []
        n = len(self.steps)
        if n % self.keyframe_every == 0:
            self._keyframe_steps.append(n)
            self._keyframes.append(self.model.copy())

    # ------------------------------------------------------------------------------- reading

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def events_of(self, step: int) -> list[ev.Event]:
        """The events of step `step` (0-based), StepStarted first."""
        return self.steps[step]

    def model_at(self, step: int) -> TreeModel:
        """A fresh TreeModel of the tree after the first `step` steps (0 <= step <= num_steps)."""
        if not 0 <= step <= len(self.steps):
            raise IndexError(f"step {step} out of range 0..{len(self.steps)}")
        i = bisect.bisect_right(self._keyframe_steps, step) - 1
        model = self._keyframes[i].copy()
        for s in range(self._keyframe_steps[i], step):
            model.apply_all(self.steps[s])
        return model

    def snapshot_at(self, step: int) -> TreeSnapshot:
        return self.model_at(step).snapshot()

    def micro_events(self, step: int) -> list[ev.Event]:
        """The events inside a step that change the picture (no StepStarted/StepEnded)."""
        return [e for e in self.steps[step] if not isinstance(e, ev.StepStarted | ev.StepEnded)]

    def __iter__(self) -> Iterator[ev.Event]:
        for step in self.steps:
            yield from step

    def to_jsonl(self) -> str:
        """One JSON object per event: {"type": class name, ...fields}; a sequence field (a
        tuple, or a compact TokenRuns) as a list. The one event exporter (the Trace page's
        download too).

        >>> from radix.tree.radix_cache import RadixCache
        >>> log = EventLog(); _ = RadixCache(sink=log).insert([7, 8])
        >>> log.to_jsonl().splitlines()[4]
        '{"type": "NodeInserted", "node_id": 1, "parent_id": 0, "token_ids": [7, 8], \
"slot_ids": [7, 8], "priority": 0, "time": 2.0, "extra_key": null, "cache_salt": null}'
        """
        lines = []
        for e in self:
            row = {"type": type(e).__name__}
            for f in dataclasses.fields(e):
                v = getattr(e, f.name)
                row[f.name] = v if isinstance(v, str | int | float | type(None)) else list(v)
            lines.append(json.dumps(row, default=str))
        return "\n".join(lines) + ("\n" if lines else "")
