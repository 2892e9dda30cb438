"""The Classroom page's words and table: who asked what, what the tree gave them, the answer.

Reads scenarios.room's `Ask` records (duck-typed: student, text, state, req with its metrics,
cancelled) and draws nothing itself: the rows go to st.dataframe (text shown as text), the
lines through esc_md. Matched and prefilled tokens are the engine's measured counts.
Leaves out: the tree and the block grid (viz/live.py and viz/blocks.py draw them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

COLUMNS = ("student", "prompt", "state", "matched", "prefilled", "answer")


def ask_rows(asks: list[Any], text_of: Callable[[Any], str], mine: str | None = None,
             states: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per prompt, newest first; `text_of(req)` is the answer so far. `mine` (a
    session id) marks that student's own prompts with a star. `states`: each ask's state as
    read once for the whole view (the engine's thread moves them meanwhile), so the rows and
    room_counts' line agree.

    A prompt that matched 40 of its 52 tokens shows matched 40, prefilled 12.
    """
    rows = []
    states = states if states is not None else [a.state for a in asks]
    for a, state in zip(reversed(asks), reversed(states), strict=True):
        req, m = a.req, (a.req.metrics if a.req is not None else None)
        row = dict.fromkeys(COLUMNS)
        star = "* " if mine is not None and a.sid == mine else ""
        row.update({"student": star + a.student, "prompt": a.text, "state": state})
        if m is not None and state == "done":
            row.update({"matched": int(m.get("matched_tokens", 0)),
                        "prefilled": int(m.get("prefilled_tokens", 0))})
        if req is not None:
            row["answer"] = text_of(req) if not req.error else f"error: {req.error}"
        elif a.cancelled:
            row["answer"] = a.cancelled
        rows.append(row)
    return rows


class RoomCounts(NamedTuple):
    waiting: int  # held in the room's queue (paused)
    running: int  # in the engine
    done: int
    matched: int  # prompt tokens served from the tree, over the done prompts
    prefilled: int  # prompt tokens computed, over the done prompts


def room_counts(asks: list[Any], states: list[str] | None = None) -> RoomCounts:
    """Counts by state and token sums: two done prompts matching 0 and 30 of 40 each ->
    matched 30, prefilled 50. `states`: as ask_rows takes them."""
    states = states if states is not None else [a.state for a in asks]
    done = [a.req.metrics for a, s in zip(asks, states, strict=True) if s == "done"]
    return RoomCounts(states.count("waiting"), states.count("running"), len(done),
                      sum(int(m.get("matched_tokens", 0)) for m in done),
                      sum(int(m.get("prefilled_tokens", 0)) for m in done))


def status_line(code: str, paused: bool, counts: RoomCounts) -> str:
    """'Room ABC23: running; 2 waiting, 1 in the engine, 5 answered; 40% of prompt tokens came
    from the tree.'"""
    total = counts.matched + counts.prefilled
    hit = f"; {counts.matched / total:.0%} of prompt tokens came from the tree" if total else ""
    return (f"Room {code}: {'paused' if paused else 'running'}; {counts.waiting} waiting, "
            f"{counts.running} in the engine, {counts.done} answered{hit}.")
