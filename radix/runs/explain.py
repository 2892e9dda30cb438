"""`explain(trace)`: why a trace's hit rate is what it is, for the tree and the block cache.

One watched simulator run (probe.py) puts every prompt token in one bucket (BUCKETS) per cache,
per request and in total; each request keeps its admission step and the eviction that cost it.
Then the what-ifs: hit rate against KV capacity (working set down to 1%), page/block size (1,
16, 64), namespaces on/off; the prefixes that saved most, the requests that lost most. Plain
data (dicts, lists of points) for the CLI's JSON and the app's charts. Leaves out: drawing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from radix.runs.compare import fewer_collections
from radix.runs.probe import (
    BUCKETS,
    Eviction,
    PrefixSaved,
    Probe,
    RequestBuckets,
    watched_run,
)
from radix.runs.progress import Progress, with_time_left
from radix.runs.riders import Run, plan_runs, run_with_riders
from radix.runs.sim import SimConfig, build, run
from radix.runs.workers import fork_map, spawn_map
from radix.traces.trace import Trace

__all__ = ["BUCKETS", "Eviction", "Explanation", "PrefixSaved", "RequestBuckets", "explain",
           "what_ifs"]
PAGE_SIZES = (1, 16, 64)


@dataclass
class Explanation:
    config: dict[str, Any]  # the SimConfig of the run (cost model: its label)
    prompt_tokens: int  # of every request in the trace
    totals: dict[str, dict[str, int]]  # "tree" / "blocks" -> bucket -> tokens
    recomputed: dict[str, int]  # "tree" / "blocks" -> tokens prefilled again after retraction
    requests: list[RequestBuckets]  # in trace (arrival) order
    top_prefixes: dict[str, list[PrefixSaved]]  # per cache, most tokens saved first
    top_losers: dict[str, list[RequestBuckets]]  # per cache, most tokens lost first
    working_set: int  # distinct tokens the tree ever cached (all namespaces)
    sim_totals: dict[str, Any]  # the simulator's own totals, for cross-checks
    what_if: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # see what_ifs

    def hit_rate(self, cache: str) -> float:
        side = self.totals.get(cache)
        return side["hit"] / self.prompt_tokens if side and self.prompt_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able data (NamedTuples become objects)."""
        return _plain(dataclasses.asdict(self))


def explain(trace: Trace, config: SimConfig | None = None, *, what_if: bool = True,
            capacities: int = 8, top: int = 10, progress: Progress | None = None,
            jobs: int = 1) -> Explanation:
    """Runs `trace` through the watched simulator and explains every prompt token.
    `progress(fraction, text)` hears of the arrivals of every run (each what-if is a run);
    `jobs` > 1 runs the what-ifs in that many worker processes.

    Two identical 40-token requests one after the other, blocks of 16, unbounded: the second
    hits 39 tokens in the tree (1 last-token cap) and 32 in the block cache (2 full blocks:
    the 8-token partial block is block rounding); the first is first seen everywhere.
    >>> from radix.traces.trace import TraceRequest
    >>> t = Trace("request", [TraceRequest(r, a, tuple(range(40)), 2) for r, a in
    ...                       (("a", 0.0), ("b", 9.0))])
    >>> e = explain(t, what_if=False)
    >>> e.requests[1].tree["hit"], e.requests[1].tree["last_token_cap"]
    (39, 1)
    >>> e.requests[1].blocks["hit"], e.requests[1].blocks["block_rounding"]
    (32, 8)
    """
    cfg = config or SimConfig()
    share = 1 / (1 + num_what_ifs(capacities)) if what_if else 1.0
    with fewer_collections():  # the build (every Req) and the rows too, not only the run
        probe, result = watched_run(trace, cfg, _ticker(progress, len(trace.requests), 0.0,
                                                         share, "buckets"))
        rows = _rows(probe)
    sides = ["tree"] + (["blocks"] if cfg.shadow else [])
    totals = {s: {b: sum(getattr(r, s)[b] for r in rows) for b in BUCKETS} for s in sides}
    recomputed = {"tree": sum(r.recomputed_tree for r in rows),
                  "blocks": sum(r.recomputed_blocks for r in rows)}
    lost = {s: sorted((r for r in rows if _lost(getattr(r, s))), key=lambda r, s=s: (
        -_lost(getattr(r, s)), r.index))[:top] for s in sides}
    out = Explanation(
        config=_plain(dataclasses.asdict(cfg)), prompt_tokens=sum(r.prompt_tokens for r in rows),
        totals=totals, recomputed=recomputed, requests=rows,
        top_prefixes={s: probe.top_prefixes(s, top) for s in sides}, top_losers=lost,
        working_set=sum(n.d1 - n.d0 for n in probe.tree.ever_any.nodes()),
        sim_totals=dict(result.totals))
    if what_if:
        out.what_if = what_ifs(trace, cfg, out.working_set, capacities, progress, share, jobs)
    return out


def num_what_ifs(capacities: int = 8) -> int:
    """Simulator runs of `what_ifs`: at most `capacities` + 1 (unbounded) on the curve, one per
    page size, two for namespaces."""
    return capacities + 1 + len(PAGE_SIZES) + 2


def _ticker(progress: Progress | None, n: int, lo: float, hi: float, what: str) -> Any:
    """An on_arrival that reports every 64th arrival as a fraction between lo and hi."""
    if progress is None:
        return None
    seen = [0]

    def tick(_req: Any) -> None:
        if seen[0] % 64 == 0:
            progress(lo + (hi - lo) * seen[0] / max(n, 1), f"{what}: request {seen[0]:,} of {n:,}")
        seen[0] += 1
    return tick


def _lost(buckets: dict[str, int] | None) -> int:
    """Tokens that were reusable in principle but prefilled: all but hit, first seen, rejected."""
    if not buckets:
        return 0
    return sum(buckets.values()) - buckets["hit"] - buckets["first_seen"] - buckets["rejected"]


def _rows(probe: Probe) -> list[RequestBuckets]:
    sim, shadow = probe.sim, probe.sim.shadow
    rows = []
    for k, req in enumerate(sim.reqs):
        n = len(req.origin_input_ids)
        rejected = dict.fromkeys(BUCKETS, 0) | {"rejected": n}
        if req.rid not in probe.tree_rows:
            rows.append(RequestBuckets(req.rid, k, n, None, None, rejected,
                                       None if shadow is None else dict(rejected),
                                       None, None, 0, 0))
            continue
        step, time, tree, tree_by = probe.tree_rows[req.rid]
        blocks, blocks_by = probe.block_rows.get(req.rid, (None, None))
        if shadow is not None and blocks is None:  # admitted by the tree, never looked up
            blocks = dict(rejected)
        again_tree = int(req.metrics.get("prefilled_tokens", 0)) - (n - tree["hit"])
        again_blocks = 0
        if shadow is not None and blocks is not None and not blocks["rejected"]:
            again_blocks = max(0, shadow.prefilled.get(req.rid, 0) - (n - blocks["hit"]))
        rows.append(RequestBuckets(req.rid, k, n, step, time, tree, blocks, tree_by, blocks_by,
                                   max(0, again_tree), again_blocks))
    return rows


def what_ifs(trace: Trace, config: SimConfig, working_set: int, capacities: int = 8,
             progress: Progress | None = None, start: float = 0.0, jobs: int = 1,
             spawn: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Hit rates of both caches (hit tokens / all prompt tokens, rejected requests included)
    against KV capacity (`capacities` points from the working set down to 1% of it, and
    unbounded), against page/block size (PAGE_SIZES, both caches the same), and with and
    without namespaces (extra_key, cache_salt dropped). The runs are independent: `jobs` > 1
    fans them out over forked workers (runs/workers.py), and a configuration asked twice (the
    namespaces' "with" is the base configuration; so is unbounded when the base is) runs once;
    unbounded runs that differ only in block size share one run (riders.py).
    `spawn`: the runs go to `jobs` spawned workers instead (one at least; spawn_map: fresh
    processes, safe in a server with threads, that exit when done), and `progress` hears
    again every POLL_S while they run, so a progress that raises (a cancel) kills them then.
    `progress` as in `explain`, from `start` to 1, with the time left: within each run with
    jobs=1, else as each run comes back."""
    total = sum(len(r.token_ids) for r in trace.requests) or 1
    points = _points(trace, config, working_set, capacities)
    spaced = points[-1][2]
    runs = list(dict.fromkeys((cfg, plain) for _, cfg, plain in points))  # each once, in order
    totals = _run_what_ifs(trace, runs, with_time_left(progress, start=start), start, jobs,
                           spawn)
    rows = []
    for extra, cfg, plain in points:
        s = totals[runs.index((cfg, plain))]
        rows.append(extra | {"tree_hit_rate": s["matched_tokens"] / total,
                             "block_hit_rate": s.get("block_matched_tokens", 0) / total,
                             "rejected": s["rejected"], "evicted_tokens": s["evicted_tokens"],
                             "retractions": s["retractions"]})
    with_ns = rows[-2] if spaced else rows[-1]
    without = rows[-1] if spaced else with_ns | {"namespaces": False}
    n = len(points) - len(PAGE_SIZES) - 1 - spaced  # the capacity curve: unbounded, each cap
    return {"capacity": rows[:n], "page_size": rows[n:n + len(PAGE_SIZES)],
            "namespaces": [with_ns, without]}


def _points(trace: Trace, config: SimConfig, working_set: int, capacities: int
            ) -> list[tuple[dict[str, Any], SimConfig, bool]]:
    """The what-ifs asked, in order: (what the row says, its configuration, namespaces
    dropped); the capacity curve, the page sizes, namespaces with (and without, if any)."""
    steps = max(capacities - 1, 1)
    caps = sorted({max(1, round(working_set * 0.01 ** (i / steps))) for i in range(capacities)},
                  reverse=True)
    points = [({"capacity": c}, dataclasses.replace(config, capacity=c), False)
              for c in [None, *caps]]
    points += [({"page_size": p}, dataclasses.replace(config, page_size=p, block_size=p), False)
               for p in PAGE_SIZES]
    points += [({"namespaces": True}, config, False)]
    if any(r.extra_key is not None or r.cache_salt is not None for r in trace.requests):
        points.append(({"namespaces": False}, config, True))
    return points


def num_simulator_runs(trace: Trace, config: SimConfig, working_set: int,
                       capacities: int = 8) -> int:
    """The simulator runs `what_ifs` makes: the what-ifs asked, each configuration once,
    riders on their run (plan_runs). An unbounded base on a trace without namespaces: 12
    configurations (the namespaces' "with" and unbounded are the base) in 11 runs.

    >>> from radix.traces.trace import TraceRequest
    >>> t = Trace("request", [TraceRequest("a", 0.0, (1, 2, 3), 1)])
    >>> bounded = SimConfig(capacity=500)
    >>> num_simulator_runs(t, SimConfig(), 1000), num_simulator_runs(t, bounded, 1000)
    (11, 13)
    """
    runs = dict.fromkeys((cfg, plain) for _, cfg, plain in _points(trace, config, working_set,
                                                                   capacities))
    return len(plan_runs(list(runs)))


_WHAT_IFS: tuple[Trace, Trace | None, list[Run], list[list[int]]] | None = None  # for workers


def _hold(trace: Trace, runs: list[Run], plan: list[list[int]]) -> None:
    """What the workers' `_what_if_worker` reads: set here before a fork, in each spawned
    worker by spawn_map's setup (the namespace-free copy made there, not pickled)."""
    global _WHAT_IFS
    _WHAT_IFS = (trace, _without_namespaces(trace, runs), runs, plan)


def _without_namespaces(trace: Trace, runs: list[Run]) -> Trace | None:
    """The trace with extra_key and cache_salt dropped, if a run asks for it."""
    if not any(strip for _, strip in runs):
        return None
    return Trace(trace.format, [dataclasses.replace(r, extra_key=None, cache_salt=None)
                                for r in trace.requests], input_lens=list(trace.input_lens))


def _what_if_worker(k: int) -> list[dict[str, Any]]:
    trace, plain, runs, plan = _WHAT_IFS
    return _simulate(plain if runs[plan[k][0]][1] else trace, runs, plan[k])


def _simulate(trace: Trace, runs: list[Run], group: list[int], on_arrival: Any = None
              ) -> list[dict[str, Any]]:
    """The totals of each run of `group` (plan_runs), in its order: one simulator run, the
    riders on it; a rider whose check failed runs on its own."""
    cfg = runs[group[0]][0]
    if len(group) == 1:
        return [run(build(trace, cfg), on_arrival).totals]
    own, riding = run_with_riders(trace, cfg, [runs[i][0].block_size for i in group[1:]],
                                  on_arrival)
    return [own] + [t if t is not None else run(build(trace, runs[i][0])).totals
                    for i, t in zip(group[1:], riding, strict=True)]


def _run_what_ifs(trace: Trace, runs: list[Run], progress: Progress | None,
                  start: float, jobs: int, spawn: bool = False) -> list[dict[str, Any]]:
    """Each (config, namespaces dropped) run's totals, in order; progress as they go."""
    global _WHAT_IFS
    plan = plan_runs(runs)
    n, share = len(plan), (1 - start) / max(len(plan), 1)
    out: list[dict[str, Any] | None] = [None] * len(runs)
    if spawn or (jobs > 1 and n > 1):
        workers = max(1, min(jobs, n))
        said = [start, f"what-ifs: {n} runs in {workers} worker processes"]
        finished = [0]

        def done(k: int, totals: list[dict[str, Any]]) -> None:
            finished[0] += 1
            said[:] = [start + share * finished[0],
                       f"what-if {finished[0]} of {n} done ({workers} worker processes)"]
            if progress is not None:
                progress(*said)
        if progress is not None:
            progress(*said)
        if spawn:
            results = spawn_map(_what_if_worker, n, jobs, done, setup=_hold,
                                setup_args=(trace, runs, plan),
                                poll=None if progress is None else lambda: progress(*said))
        else:
            _hold(trace, runs, plan)
            try:
                results = fork_map(_what_if_worker, n, jobs, done)
            finally:
                _WHAT_IFS = None
    else:
        plain, results = _without_namespaces(trace, runs), []
        for k, group in enumerate(plan):
            t = plain if runs[group[0]][1] else trace
            what = f"what-if {k + 1} of {n} ({_label(runs, group)})"
            results.append(_simulate(t, runs, group, _ticker(
                progress, len(t.requests), start + share * k, start + share * (k + 1), what)))
    for group, totals in zip(plan, results, strict=True):
        for i, t in zip(group, totals, strict=True):
            out[i] = t
    return out


def _label(runs: list[Run], group: list[int]) -> str:
    """The run's settings: "capacity unbounded, page 1, blocks of 16 and 1"."""
    cfg, strip = runs[group[0]]
    cap = "unbounded" if cfg.capacity is None else f"{cfg.capacity:,}"
    blocks = " and ".join(str(runs[i][0].block_size) for i in group)
    return (f"capacity {cap}, page {cfg.page_size}, blocks of {blocks}"
            + (", no namespaces" if strip else ""))


def _plain(value: Any) -> Any:
    """NamedTuples and dataclasses as dicts, tuples as lists, recursively."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
