"""The Trace debugger's "Why this hit rate?" panel: the explainer run on the uploaded trace.

Runs `radix.runs.explain` (one watched simulator run: every prompt token in one bucket per
cache; then, as a second job, the what-ifs) inside the session's memory budget
(runtime/budget.py) with progress and cancel as the replay has, and ties each bucket to the
debugger: its example requests and the step of the replay where each was looked up
(`step_of`). The explainer runs SGLang's scheduler (batches, requests in flight); the replay one
request at a time, so a request's hit may differ between the two where requests overlap in
time: the panel says so.
Leaves out: drawing (viz/explain.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from radix.runs.explain import BUCKETS, Explanation, explain, num_what_ifs, what_ifs
from radix.runs.sim import SimConfig
from radix.traces.base import Trace
from runtime.budget import BUDGET, Budget
from scenarios.trace import Cancelled, Progress

WHAT = "trace explain"
POLICIES = ("fcfs", "lpm")  # fcfs: arrival order, as the replay; lpm: SGLang's default
# estimates from tracemalloc peaks of the watched run on examples/traces (x 2 for headroom):
# the Mooncake excerpt 3.9 MB (200 requests), rag 7.1 MB (46,169 tokens), customer support
# 5.4 MB (62,125 tokens); 163 KB kept for the excerpt's 200 rows
BYTES_PER_REQUEST = 40_000  # probe rows, tries' nodes, scheduler state
BYTES_PER_TOKEN = 300  # request traces spell every token: the tries keep them as ints
KEPT_PER_REQUEST = 2_000  # an Explanation's row per request, kept after the run
EXAMPLES = 3  # requests shown per bucket
WHAT_IF_RUNS = num_what_ifs()  # simulator runs of the what-ifs (at most)


class Example(NamedTuple):
    """A request that has tokens in a bucket."""

    rid: str
    index: int  # in the trace (arrival order)
    tokens: int  # its tokens in the bucket


@dataclass
class Explained:
    key: tuple  # (trace digest, capacity, policy): cached by content and settings
    config: SimConfig
    explanation: Explanation
    seconds: float  # the watched run's wall time
    examples: dict[str, dict[str, list[Example]]]  # cache -> bucket -> the largest first
    what_if_seconds: float | None = None


def settings(capacity: int, policy: str = "fcfs") -> SimConfig:
    """The explainer's SimConfig for the debugger's settings (page 1, blocks of 16)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    return SimConfig(policy=policy, capacity=capacity, page_size=1, block_size=16)


def estimate(trace: Trace) -> int:
    """Bytes the watched run may hold: per request, and per token for request traces (a
    Mooncake request's tokens are runs of 512, held compactly)."""
    n = len(trace.requests)
    if trace.format == "mooncake":
        return BYTES_PER_REQUEST * n
    tokens = sum(trace.input_lens) + sum(r.output_len for r in trace.requests)
    return BYTES_PER_REQUEST * n + BYTES_PER_TOKEN * tokens


def _checked(progress: Progress | None, cancel: threading.Event | None) -> Any:
    def report(fraction: float, text: str) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        if progress is not None:
            progress(fraction, text)
    return report


def run_explain(trace: Trace, digest: str, capacity: int, policy: str = "fcfs", *,
                session_id: str = "-", budget: Budget = BUDGET,
                progress: Progress | None = None, cancel: threading.Event | None = None
                ) -> Explained:
    """The buckets, top prefixes and losers of `trace` (no what-ifs: `run_what_ifs`). Holds
    `estimate(trace)` bytes in `budget` under (session_id, "trace explain") while it runs, then
    what the result keeps; BudgetError when it would not fit, Cancelled when cancelled."""
    if trace.format not in ("request", "mooncake"):
        raise ValueError(f"the explainer needs a request or Mooncake trace, not {trace.format}")
    budget.reserve(session_id, WHAT, estimate(trace))
    try:
        t0 = time.perf_counter()
        e = explain(trace, settings(capacity, policy), what_if=False,
                    progress=_checked(progress, cancel))
        seconds = time.perf_counter() - t0
    except BaseException:
        budget.release(session_id, WHAT)
        raise
    budget.reserve(session_id, WHAT, KEPT_PER_REQUEST * len(trace.requests))
    if progress is not None:
        progress(1.0, "done")
    return Explained((digest, capacity, policy), settings(capacity, policy), e, seconds,
                     examples(e))


def run_what_ifs(trace: Trace, done: Explained, *, progress: Progress | None = None,
                 cancel: threading.Event | None = None) -> Explained:
    """Fills `done.explanation.what_if` (the capacity curve, page/block sizes, namespaces):
    WHAT_IF_RUNS more simulator runs, each with progress; Cancelled when cancelled."""
    e = done.explanation
    t0 = time.perf_counter()
    e.what_if = what_ifs(trace, done.config, e.working_set,
                         progress=_checked(with_time_left(progress), cancel))
    done.what_if_seconds = time.perf_counter() - t0
    return done


def with_time_left(progress: Progress | None, clock: Any = time.perf_counter
                   ) -> Progress | None:
    """`progress` with the time left, measured: the time so far over the fraction done (said
    once 2% is done), so the estimate is the runs' own, not a guess from another run.

    >>> ticks = iter([0.0, 10.0]); said = []
    >>> p = with_time_left(lambda f, t: said.append(t), clock=lambda: next(ticks))
    >>> p(0.25, "what-if 4 of 13"); said  # 10 s for a quarter: 30 s to go
    ['what-if 4 of 13; about 30 s left']
    """
    if progress is None:
        return None
    t0 = clock()

    def report(fraction: float, text: str) -> None:
        spent = clock() - t0
        if 0.02 <= fraction < 1:
            text += f"; about {spent / fraction * (1 - fraction):,.0f} s left"
        progress(fraction, text)
    return report


def examples(e: Explanation, top: int = EXAMPLES) -> dict[str, dict[str, list[Example]]]:
    """Per cache and bucket, the requests with the most tokens in it (ties: the earliest).

    Two identical 40-token requests, blocks of 16: the tree's hit bucket has one example, the
    second request (index 1) with 39 tokens."""
    out: dict[str, dict[str, list[Example]]] = {}
    for side in e.totals:
        out[side] = {}
        for b in BUCKETS:
            rows = [(getattr(r, side) or {}).get(b, 0) for r in e.requests]
            best = sorted((i for i, n in enumerate(rows) if n), key=lambda i: (-rows[i], i))
            out[side][b] = [Example(e.requests[i].rid, i, rows[i]) for i in best[:top]]
    return out


def step_of(replay: Any, rid: str, cache: str) -> int | None:
    """The debugger's step (steps done: the `trace.at` to show) for request `rid`: the tree
    after its lookup (the match highlighted) for the tree; after its finish for the block
    cache (the block view shows whole requests and its lookup line). None: not in the log."""
    found = replay.index.get(rid, [])
    want = "looked up" if cache == "tree" else "finished"
    step = next((f.step for f in found if f.what == want), None)
    if step is None:
        step = next((f.step for f in found if f.what in ("looked up", "rejected")), None)
    return None if step is None else step + 1
