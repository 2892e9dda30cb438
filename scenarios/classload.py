"""A simulated class: N students in a few rooms, each a thread that asks and watches its room.

Each student joins its room by code (as the page does) and asks `prompts_each` prompts tagged
with the room's code, each once the last is answered, polling the room every `poll_s` seconds
(the page's refresh, at a fixed rate). When the version moved it notes how long ago the first
change it had not seen happened (change -> seen latency) and checks that every prompt it sees
carries its room's code (isolation; the tree's texts too, once at the end). Used by
tests/scenarios/test_classroom.py and benchmarks/classroom_load.py. Leaves out: browsers (AppTest
and Playwright cover the page).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import NamedTuple

from scenarios.classroom import Classroom
from scenarios.room import MakeSession, Room, RoomError

TOPICS = ("radix trees", "prefix caching", "KV blocks", "eviction", "batching")


class StudentLog(NamedTuple):
    asked: int
    answered: int  # done, with an answer
    failed: list[str]  # why each unanswered prompt was not answered
    refused: list[str]  # asks the room refused (queue caps)
    latencies: list[float]  # seconds from a change to this student's seeing it
    foreign: list[str]  # texts from another room this student saw (must stay empty)


class ClassReport(NamedTuple):
    students: int
    rooms: int
    asked: int
    answered: int
    failed: list[str]
    refused: list[str]
    foreign: list[str]
    latencies: list[float]  # every change -> seen latency of every student
    seconds: float  # wall time of the whole class

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) of the latencies; 0.0 with none."""
        if not self.latencies:
            return 0.0
        if len(self.latencies) == 1:
            return self.latencies[0]
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[int(q) - 1] \
            if 1 <= q <= 99 else (min(self.latencies) if q < 1 else max(self.latencies))


def _student(room: Room, me: int, prompts: int, poll_s: float, deadline: float,
             others: list[str]) -> StudentLog:
    sid, name = f"student-{me}", f"student {me}"
    stop = threading.Event()  # never set: each wait is the page's refresh interval
    seen = room.pump()
    mine: list = []
    refused: list[str] = []
    latencies: list[float] = []
    foreign: list[str] = []
    tick = time.monotonic()
    while time.monotonic() < deadline:
        if len(mine) + len(refused) < prompts and all(_ended(a) for a in mine):
            k = len(mine) + len(refused)  # the next question, once the last one is answered
            text = f"[{room.code}] Question {k} from {name}: what about {TOPICS[(me + k) % 5]}?"
            try:
                mine.append(room.ask(sid, name, text))
            except RoomError as exc:
                refused.append(str(exc))
        tick += poll_s  # a fixed rate, as the page's timer: the checks below do not push it back
        stop.wait(max(tick - time.monotonic(), 0.0))
        version = room.pump()
        if version != seen:
            first = room.changes.first_change_after(seen)
            if first is not None:
                latencies.append(max(time.time() - first, 0.0))
            seen = version
            foreign += [a.text for a in room.rows() if any(c in a.text for c in others)]
        if len(mine) + len(refused) >= prompts and all(_ended(a) for a in mine):
            break
    foreign += _foreign(room, others)  # the tree's texts, once: decoding them all is not cheap
    answered = sum(a.state == "done" for a in mine)
    failed = [f"{a.text}: {a.state} {a.cancelled or (a.req and a.req.error) or ''}"
              for a in mine if a.state != "done"]
    return StudentLog(len(mine), answered, failed, refused, latencies, foreign)


def _ended(ask: object) -> bool:
    return ask.state not in ("waiting", "running")  # type: ignore[attr-defined]


def _foreign(room: Room, others: list[str]) -> list[str]:
    """Texts in the room's rows or tree that name another room's code."""
    texts = [a.text for a in room.rows()]
    snap = room.session.tree.snapshot()
    texts += [room.session.decode(list(n.token_ids)) for n in snap.nodes if n.token_ids]
    return [t for t in texts if any(code in t for code in others)]


def simulate_class(make_session: MakeSession, students: int = 30, rooms: int = 3,
                   prompts_each: int = 2, poll_s: float = 0.5, timeout_s: float = 120.0,
                   registry: Classroom | None = None) -> ClassReport:
    """Opens `rooms` rooms, runs `students` student threads round-robin over them, closes the
    rooms; returns what the students saw."""
    registry = registry or Classroom()
    opened = [registry.open(make_session) for _ in range(rooms)]
    codes = [r.code for r in opened]
    logs: list[StudentLog | None] = [None] * students
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()

    def run(i: int) -> None:
        room = registry.get(codes[i % rooms].lower())  # typed by a student
        others = [c for c in codes if c != room.code]
        logs[i] = _student(room, i, prompts_each, poll_s, deadline, others)

    threads = [threading.Thread(target=run, args=(i,), name=f"student-{i}")
               for i in range(students)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 30)
    seconds = time.monotonic() - started
    for code, room in zip(codes, opened):
        registry.close(code, room.token)
    done = [log for log in logs if log is not None]
    return ClassReport(
        students, rooms, sum(g.asked for g in done), sum(g.answered for g in done),
        [f for g in done for f in g.failed] + ["a student thread did not finish"] * (
            students - len(done)),
        [r for g in done for r in g.refused], [f for g in done for f in g.foreign],
        [x for g in done for x in g.latencies], seconds)
