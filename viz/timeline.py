"""A cursor over an EventLog: (step, k) is the tree after `step` steps plus k micro-events.

Each frame carries the snapshot to draw, the highlight for the event just played (split, new,
lock, evicted, matched, touched), its narration, the nodes it names (a fold keeps them) and,
where it speaks of access times, each named node's time as a second label line. Scrubbing to
any step costs one keyframe copy plus at most `keyframe_every` steps of replay
(radix/tree/replay.py), well under a second at 10,000 steps. subtle: an eviction frame shows the
leaf still in place, in red; the next frame removes it. Leaves out: block-cache frames
(viz/blocks.py draws those per request).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix import events as ev
from radix.tree.replay import EventLog
from viz.roles import role_of
from viz.words import build_owners, named_nodes, narrate


class Frame(NamedTuple):
    step: int  # steps fully played before this frame (0..num_steps)
    k: int  # micro-events of `step` played (0..num_micro(step))
    snapshot: Any  # TreeSnapshot to draw
    highlight: dict[int, str]  # node id -> role of viz.roles.ROLES: what the event changed
    narration: str  # one line for the event just played (a step's first line at k = 0)
    named: frozenset[int] = frozenset()  # nodes the narration names: a fold keeps them drawn
    labels: dict[int, str] | None = None  # a second label line per node ("t=6"), or None


def access_labels(line: str, snapshot: Any, named: frozenset[int]) -> dict[int, str] | None:
    """When a sentence speaks of access times, each node it names labelled with its own
    ("t=6"), so the picture shows what the words say; else None."""
    if "access time" not in line:
        return None
    return {n.id: f"t={n.last_access_time:g}" for n in snapshot.nodes if n.id in named}


def _key_len(micro: list[ev.Event]) -> int | None:
    """The key length of a step's match (its PrefixMatched), which explains where it split."""
    return next((e.key_len for e in micro if isinstance(e, ev.PrefixMatched)), None)


class Timeline:
    """Frames of a log. `frame(s, k)` for 0 <= s <= num_steps, 0 <= k <= num_micro(s)."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.owners = build_owners(log.steps)

    @property
    def num_steps(self) -> int:
        return self.log.num_steps

    def num_micro(self, step: int) -> int:
        return len(self.log.micro_events(step)) if step < self.num_steps else 0

    def rid_of(self, step: int) -> str | None:
        first = self.log.events_of(step)[0] if step < self.num_steps else None
        return first.rid if isinstance(first, ev.StepStarted) else None

    def frame(self, step: int, k: int = 0) -> Frame:
        if not 0 <= step <= self.num_steps:
            raise IndexError(f"step {step} out of range 0..{self.num_steps}")
        if not 0 <= k <= self.num_micro(step):
            raise IndexError(f"micro-event {k} out of range 0..{self.num_micro(step)}")
        model = self.log.model_at(step)
        if k == 0:  # a step's first line: what it names, outlined (it changes nothing yet)
            line, snap = self._step_line(step), model.snapshot()
            named = frozenset(named_nodes(line)) & {n.id for n in snap.nodes}
            return Frame(step, 0, snap, {i: "named" for i in named if i}, line, named)
        micro = self.log.micro_events(step)
        model.apply_all(micro[: k - 1])
        last = micro[k - 1]
        line = narrate(last, model, self.owners, self.rid_of(step), _key_len(micro),
                       op=self.log.events_of(step)[0].op, earlier=micro[: k - 1])
        if not isinstance(last, ev.NodeEvicted):
            model.apply(last)
        snap = model.snapshot()
        named = frozenset(named_nodes(line)) & {n.id for n in snap.nodes}
        return Frame(step, k, snap, role_of(last), line, named,
                     access_labels(line, snap, named))

    def _step_line(self, step: int) -> str:
        if step >= self.num_steps:
            return f"end of the log: {self.num_steps:,} steps"
        first = self.log.events_of(step)[0]
        return narrate(first, self.log.model, self.owners, self.rid_of(step))

    def next(self, step: int, k: int) -> tuple[int, int]:
        """The cursor one micro-event later (stays at the end)."""
        if k < self.num_micro(step):
            return step, k + 1
        return (step + 1, 0) if step < self.num_steps else (step, k)

    def prev(self, step: int, k: int) -> tuple[int, int]:
        """The cursor one micro-event earlier (stays at the start)."""
        if k > 0:
            return step, k - 1
        return (step - 1, self.num_micro(step - 1)) if step > 0 else (0, 0)
