"""The Trace debugger's "Why this hit rate?" panel: the explainer run on the uploaded trace.

Runs `radix.runs.explain` (one watched simulator run: every prompt token in one bucket per
cache; then, as a second job, the what-ifs, in worker processes that exit when done, so
their memory does not stay in the server) inside the session's memory budget
(runtime/budget.py) with progress and cancel as the replay has, and ties each bucket to the
debugger: its example requests and the step of the replay where each was looked up
(`step_of`). The explainer runs SGLang's scheduler (batches, requests in flight); the replay one
request at a time, so a request's hit may differ between the two where requests overlap in
time: the panel says so.
`run_host_tier` is `explain --host-ratio`'s section for the panel (radix/hosttier/explain.py:
the trace one request at a time through the host tier, each host hit's demotion named), with
`host_summary` / `host_rows` its words and table. Leaves out: drawing (viz/explain.py).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from radix.hosttier.explain import HostTierExplanation, explain_host_tier
from radix.runs.explain import (
    BUCKETS,
    Explanation,
    explain,
    num_simulator_runs,
    num_what_ifs,
    what_ifs,
)
from radix.runs.memory import estimate  # what the watched run holds (the CLI's too)
from radix.runs.progress import with_time_left  # noqa: F401 (the panel's name, kept)
from radix.runs.sim import SimConfig
from radix.traces.trace import Trace
from runtime.budget import BUDGET, Budget
from scenarios.trace import Cancelled, Progress

T = TypeVar("T")

WHAT = "trace explain"
WHAT_HOST = "trace host tier"
HOST_RATIOS = (2.0, 4.0, 8.0)  # the panel's host pools (x the device pool), SGLang's default 2
POLICIES = ("fcfs", "lpm")  # fcfs: arrival order, as the replay; lpm: SGLang's default
KEPT_PER_REQUEST = 2_000  # an Explanation's row per request, kept after the run
EXAMPLES = 3  # requests shown per bucket
WHAT_IF_RUNS = num_what_ifs()  # simulator runs of the what-ifs (at most)
# a what-if run (plain simulator) over the watched run (probe, buckets), in CPU seconds, page 1,
# capacity 1,000,000, fcfs, load average 12-25 on this 2-core machine: Mooncake's synthetic
# trace 40.2 s for 13 runs after a 5.11 s watched run (0.61); the conversation stand-in 216.6 s
# after 25.8 s (0.65)
PLAIN_PER_WATCHED = 0.6
# what-ifs that should take less than this in one process run in it (the server's job thread):
# a worker's start (~0.6 s of imports when idle) would cost more than they do, and what they
# build is small; longer ones go to worker processes that exit when done (run_what_ifs)
IN_PROCESS_UNDER_S = 2.0


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


def _checked(progress: Progress | None, cancel: threading.Event | None) -> Any:
    def report(fraction: float, text: str) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        if progress is not None:
            progress(fraction, text)
    return report


def _within_budget(budget: Budget, session_id: str, what: str, trace: Trace, run: Callable[[], T]
                   ) -> T:
    """`run()` with `estimate(trace)` bytes held in `budget` under (session_id, what) while it
    runs, then what its result keeps (KEPT_PER_REQUEST a request); all released if it raises."""
    budget.reserve(session_id, what, estimate(trace))
    try:
        out = run()
    except BaseException:
        budget.release(session_id, what)
        raise
    budget.reserve(session_id, what, KEPT_PER_REQUEST * len(trace.requests))
    return out


def run_explain(trace: Trace, digest: str, capacity: int, policy: str = "fcfs", *,
                session_id: str = "-", budget: Budget = BUDGET,
                progress: Progress | None = None, cancel: threading.Event | None = None
                ) -> Explained:
    """The buckets, top prefixes and losers of `trace` (no what-ifs: `run_what_ifs`). Holds
    `estimate(trace)` bytes in `budget` under (session_id, "trace explain") while it runs, then
    what the result keeps; BudgetError when it would not fit, Cancelled when cancelled."""
    if trace.format not in ("request", "mooncake"):
        raise ValueError(f"the explainer needs a request or Mooncake trace, not {trace.format}")
    t0 = time.perf_counter()
    e = _within_budget(budget, session_id, WHAT, trace, lambda: explain(
        trace, settings(capacity, policy), what_if=False, progress=_checked(progress, cancel)))
    seconds = time.perf_counter() - t0
    if progress is not None:
        progress(1.0, "done")
    return Explained((digest, capacity, policy), settings(capacity, policy), e, seconds,
                     examples(e))


def what_if_workers(trace: Trace, done: Explained) -> int:
    """Worker processes for the what-ifs: one per CPU (os.cpu_count), at most one per
    simulator run they make; 0 (this process) when they should take under IN_PROCESS_UNDER_S
    in one (what_if_estimate)."""
    if what_if_estimate(trace, done) < IN_PROCESS_UNDER_S:
        return 0
    runs = num_simulator_runs(trace, done.config, done.explanation.working_set)
    return max(1, min(os.cpu_count() or 1, runs))


def free_cores(load: float | None = None) -> int:
    """Cores the what-ifs' workers can have: the CPUs less the load average (others' work, the
    server's own), at least 1. 2 CPUs at load 1.2: 1 (two workers run no faster than one)."""
    load = os.getloadavg()[0] if load is None else load
    return max(1, round((os.cpu_count() or 1) - load))


def what_if_estimate(trace: Trace, done: Explained, workers: int = 1,
                     cores: int | None = None) -> float:
    """Seconds the what-ifs should take in `workers` processes (0: this one): the watched
    run's seconds, times PLAIN_PER_WATCHED a run, times the simulator runs each worker makes
    (the runs, num_simulator_runs, dealt out: the slowest worker's share), the workers no
    more than the free `cores` (free_cores: issue 41 said "about 54 s" for two workers on a
    2-core server at load ~1, and they took 104-112 s: one core's worth).

    >>> from radix.traces.trace import TraceRequest
    >>> t = Trace("request", [TraceRequest("a", 0.0, (1, 2, 3), 1)])
    >>> e = explain(t, settings(1_000_000), what_if=False)
    >>> e.working_set = 100_000  # 8 distinct capacities on the curve
    >>> x = Explained(("d", 1_000_000, "fcfs"), settings(1_000_000), e, 10.0, {})
    >>> round(what_if_estimate(t, x), 1)  # 13 runs (bounded base) x 0.6 x 10 s
    78.0
    >>> round(what_if_estimate(t, x, workers=2, cores=2), 1)  # 7 of the 13 on one of them
    42.0
    >>> round(what_if_estimate(t, x, workers=2, cores=1), 1)  # one free core: all 13 in turn
    78.0
    """
    runs = num_simulator_runs(trace, done.config, done.explanation.working_set)
    parallel = max(1, min(workers, free_cores() if cores is None else cores))
    return done.seconds * PLAIN_PER_WATCHED * math.ceil(runs / parallel)


def run_what_ifs(trace: Trace, done: Explained, *, progress: Progress | None = None,
                 cancel: threading.Event | None = None, workers: int | None = None
                 ) -> Explained:
    """Fills `done.explanation.what_if` (the capacity curve, page/block sizes, namespaces):
    up to WHAT_IF_RUNS more simulator runs, in `workers` spawned worker processes (None:
    what_if_workers, 0 for short ones) that exit when done, so their memory leaves the
    server with them; progress as each run comes back, with the time left; Cancelled when
    cancelled (the workers killed within POLL_S). `workers=0`: in this process, progress
    within each run. The figures are the same either way."""
    e = done.explanation
    t0 = time.perf_counter()
    jobs = what_if_workers(trace, done) if workers is None else workers
    e.what_if = what_ifs(trace, done.config, e.working_set,
                         progress=_checked(progress, cancel), jobs=max(1, jobs),
                         spawn=jobs > 0)
    done.what_if_seconds = time.perf_counter() - t0
    return done


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


def run_host_tier(trace: Trace, capacity: int, ratio: float,
                  write_policy: str = "write_through", *, session_id: str = "-",
                  budget: Budget = BUDGET, progress: Progress | None = None,
                  cancel: threading.Event | None = None) -> HostTierExplanation:
    """`python -m radix explain TRACE --capacity N --host-ratio R`'s host section: the split
    into device hit / host hit / miss and why each host hit was on the host. Holds
    `estimate(trace)` in `budget` while it runs, then what the result keeps (as run_explain);
    Cancelled when cancelled before it starts."""
    if trace.format not in ("request", "mooncake"):
        raise ValueError(f"the host tier needs a request or Mooncake trace, not {trace.format}")
    _checked(progress, cancel)(0.0, "host tier: requests one at a time")
    e = _within_budget(budget, session_id, WHAT_HOST, trace,
                       lambda: explain_host_tier(trace, capacity, ratio, write_policy))
    if progress is not None:
        progress(1.0, "done")
    return e


def host_summary(e: HostTierExplanation) -> str:
    """One paragraph: the split, where the host hits came from, what was lost.

    >>> from radix.traces.trace import TraceRequest
    >>> toks = {"a": range(1, 13), "b": range(101, 113), "c": range(201, 213)}
    >>> t = Trace("request", [TraceRequest(f"{r}{k}", float(k), tuple(toks[r]), 1)
    ...                       for k, r in enumerate("abcab")])
    >>> host_summary(explain_host_tier(t, 24, 2.0)).split(". ")[0]
    'device hit 0 (0.0%), host hit (loaded back) 22 (36.7%), miss 38 (63.3%) of 60 prompt tokens'
    """
    r, p = e.run, e.run.prompt_tokens or 1
    causes = e.by_cause()
    lost: dict[str, int] = {}
    for q in e.requests:
        if q.lost_by is not None:
            lost[q.lost_by.cause] = lost.get(q.lost_by.cause, 0) + q.lost
    gone = "; ".join(f"{c} {n:,}" for c, n in sorted(lost.items())) or "none"
    return (f"device hit {r.device_hit:,} ({r.device_hit / p:.1%}), host hit (loaded back) "
            f"{r.host_hit:,} ({r.host_hit / p:.1%}), miss {r.miss:,} ({r.miss / p:.1%}) of "
            f"{r.prompt_tokens:,} prompt tokens. Host hits demoted by another request's "
            f"allocation {causes['allocation']:,}, by a load back's room "
            f"{causes['load back']:,}. Cached before but on neither tier now: {gone}.")


def host_rows(e: HostTierExplanation, top: int = 10) -> list[dict[str, Any]]:
    """The requests that loaded the most back, and the eviction that had put each on host."""
    rows = []
    for q in e.top(top):
        why = "; ".join(f"{d.tokens:,} demoted while serving {d.by_rid} ({d.cause})"
                        for d in q.demotions)
        rows.append({"request": q.rid, "device hit": q.device_hit, "host hit": q.host_hit,
                     "miss": q.miss, "why it was on the host": why})
    return rows
