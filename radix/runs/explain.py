"""`explain(trace)`: why a trace's hit rate is what it is, for the tree and the block cache.

One watched simulator run (probe.py) puts every prompt token in one bucket (BUCKETS) per cache,
per request and in total; each request keeps its admission step and the eviction that cost it.
Then the what-ifs: hit rate against KV capacity (working set down to 1%), page/block size (1,
16, 64), namespaces on/off; the prefixes that saved most, the requests that lost most. Plain
data (dicts, lists of points) for the CLI's JSON and the app's charts. Leaves out: drawing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radix.runs.probe import (
    BUCKETS,
    Eviction,
    PrefixSaved,
    Probe,
    RequestBuckets,
    watched_run,
)
from radix.runs.sim import SimConfig, build, run
from radix.runs.workers import fork_map
from radix.traces.base import Trace

__all__ = ["BUCKETS", "Eviction", "Explanation", "PrefixSaved", "RequestBuckets", "explain",
           "what_ifs"]
PAGE_SIZES = (1, 16, 64)
Progress = Callable[[float, str], None]  # (fraction done, what runs now); may raise to stop


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
    >>> from radix.traces.base import TraceRequest
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
    probe, result = watched_run(trace, cfg, _ticker(progress, len(trace.requests), 0.0, share,
                                                     "buckets"))
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
             progress: Progress | None = None, start: float = 0.0, jobs: int = 1
             ) -> dict[str, list[dict[str, Any]]]:
    """Hit rates of both caches (hit tokens / all prompt tokens, rejected requests included)
    against KV capacity (`capacities` points from the working set down to 1% of it, and
    unbounded), against page/block size (PAGE_SIZES, both caches the same), and with and
    without namespaces (extra_key, cache_salt dropped). The runs are independent: `jobs` > 1
    fans them out over forked workers (runs/workers.py), and a configuration asked twice (the
    namespaces' "with" is the base configuration; so is unbounded when the base is) runs once.
    `progress` as in `explain`, from `start` to 1: within each run with jobs=1, else as each
    run comes back."""
    total = sum(len(r.token_ids) for r in trace.requests) or 1
    steps = max(capacities - 1, 1)
    caps = sorted({max(1, round(working_set * 0.01 ** (i / steps))) for i in range(capacities)},
                  reverse=True)
    spaced = any(r.extra_key is not None or r.cache_salt is not None for r in trace.requests)
    points = [({"capacity": c}, dataclasses.replace(config, capacity=c), False)
              for c in [None, *caps]]
    points += [({"page_size": p}, dataclasses.replace(config, page_size=p, block_size=p), False)
               for p in PAGE_SIZES]
    points += [({"namespaces": True}, config, False)]
    if spaced:
        points.append(({"namespaces": False}, config, True))
    runs = list(dict.fromkeys((cfg, plain) for _, cfg, plain in points))  # each once, in order
    totals = _run_what_ifs(trace, runs, progress, start, jobs)
    rows = []
    for extra, cfg, plain in points:
        s = totals[runs.index((cfg, plain))]
        rows.append(extra | {"tree_hit_rate": s["matched_tokens"] / total,
                             "block_hit_rate": s.get("block_matched_tokens", 0) / total,
                             "rejected": s["rejected"], "evicted_tokens": s["evicted_tokens"],
                             "retractions": s["retractions"]})
    with_ns = rows[-2] if spaced else rows[-1]
    without = rows[-1] if spaced else with_ns | {"namespaces": False}
    n = len(caps) + 1  # the capacity curve: unbounded, then each capacity
    return {"capacity": rows[:n], "page_size": rows[n:n + len(PAGE_SIZES)],
            "namespaces": [with_ns, without]}


_WHAT_IFS: tuple[Trace, Trace | None, list[tuple[SimConfig, bool]]] | None = None  # for workers


def _what_if_forked(i: int) -> dict[str, Any]:
    trace, plain, runs = _WHAT_IFS
    cfg, strip = runs[i]
    return run(build(plain if strip else trace, cfg)).totals


def _run_what_ifs(trace: Trace, runs: list[tuple[SimConfig, bool]], progress: Progress | None,
                  start: float, jobs: int) -> list[dict[str, Any]]:
    """Each (config, namespaces dropped) run's totals, in order; progress as they go."""
    global _WHAT_IFS
    plain = None
    if any(strip for _, strip in runs):
        plain = Trace(trace.format, [dataclasses.replace(r, extra_key=None, cache_salt=None)
                                     for r in trace.requests], input_lens=list(trace.input_lens))
    n, share = len(runs), (1 - start) / max(len(runs), 1)
    if jobs > 1 and n > 1:
        def done(i: int, _totals: Any) -> None:
            if progress is not None:
                progress(start + share * (i + 1), f"what-if {i + 1} of {n} done "
                                                  f"({min(jobs, n)} worker processes)")
        if progress is not None:
            progress(start, f"what-ifs: {n} runs in {min(jobs, n)} worker processes")
        _WHAT_IFS = (trace, plain, runs)
        try:
            return fork_map(_what_if_forked, n, jobs, done)
        finally:
            _WHAT_IFS = None
    out = []
    for i, (cfg, strip) in enumerate(runs):
        t = plain if strip else trace
        what = f"what-if {i + 1} of {n} ({_label(cfg, strip)})"
        out.append(run(build(t, cfg), _ticker(progress, len(t.requests), start + share * i,
                                              start + share * (i + 1), what)).totals)
    return out


def _label(cfg: SimConfig, strip: bool) -> str:
    cap = "unbounded" if cfg.capacity is None else f"{cfg.capacity:,}"
    return f"capacity {cap}, page {cfg.page_size}" + (", no namespaces" if strip else "")


def _plain(value: Any) -> Any:
    """NamedTuples and dataclasses as dicts, tuples as lists, recursively."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
