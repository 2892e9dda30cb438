"""The simulated cluster: N replicas of the simulated engine behind one router, on one clock.

Each replica is what `simulate` runs (radix/runs/sim.py: the scheduler, the radix tree, vLLM's
block cache shadow, the cost model) with its own pool and its own simulated GPU clock. One loop
orders everything in simulated time: while a replica with work is behind the next arrival, the
one furthest behind steps (fast-forwarding decode to the arrival, as `simulate` does); then the
arrival is routed, seeing each replica's load (requests and tokens in flight) as of then.
With one replica this is `simulate`'s loop step for step (a test holds the figures identical).
kv-overlap's index hears of the blocks each replica's prefills stored (radix.cluster.kv_overlap
KeyIndex). Leaves out: network delays, the router's own latency, replica failures.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from radix.cluster import ROUTERS, Decision, KeyIndex, Load, RouteRequest, block_keys, make_router
from radix.request import Req
from radix.runs.compare import fewer_collections
from radix.runs.sim import SimConfig, SimRun, _rates_over_all, _row, _totals, build
from radix.traces.mooncake import BLOCK_TOKENS
from radix.traces.trace import Trace, is_compact_trace, trace_reqs

MAX_REPLICAS = 1_024  # simulated replicas of one run, at most (each holds its own engine state)
_TURN = re.compile(r"^(.+)-t\d+$")  # "u007-t3": session "u007" (examples' conversation rids)


def session_of(rid: str) -> str | None:
    """The conversation a request belongs to, when its rid names one ("<session>-t<turn>").

    >>> session_of("u007-t3"), session_of("r42")
    ('u007', None)
    """
    m = _TURN.match(rid)
    return m.group(1) if m else None


def route_block_size(trace: Trace) -> int:
    """Tokens per block key the routers see: a Mooncake trace's own block (one hash id, 512
    tokens), else vLLM's default block size, 16."""
    return BLOCK_TOKENS if is_compact_trace(trace) else 16


@dataclass
class ClusterResult:
    replicas: int
    router: str
    totals: dict[str, Any]  # as `simulate`'s totals, over every replica, plus the cluster's
    per_replica: list[dict[str, Any]]  # each replica's own `simulate` totals, plus busy_s
    decisions: list[tuple[str, int, str]] = field(default_factory=list)  # (rid, rank, reason)
    reasons: dict[str, int] = field(default_factory=dict)  # decisions by reason
    sims: list[SimRun] = field(default_factory=list)  # the replicas' runs (keep_state=True)
    chooser: Any = None  # the router object after the run (keep_state=True)

    def summary(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "router": self.router, "totals": self.totals,
                "per_replica": self.per_replica, "reasons": self.reasons}


class _Replica:
    def __init__(self, sim: SimRun) -> None:
        self.sim, self.busy, self.cursor = sim, 0.0, 0
        self.in_flight: dict[int, int] = {}  # id(req) -> its tokens


def simulate_cluster(trace: Trace, replicas: int, router: str,
                     config: SimConfig | None = None, *, block_size: int | None = None,
                     keep_decisions: bool = False, on_route: Any = None,
                     router_config: Any = None, keep_state: bool = False,
                     watch: Any = None) -> ClusterResult:
    """Replays `trace` through `replicas` simulated engines behind `router` (one of ROUTERS).
    `block_size`: tokens per routing block (default `route_block_size`). `on_route(req,
    decision, loads)` sees every routing decision; `router_config` overrides the router's
    documented defaults (make_router's `config`); `keep_state` keeps the replicas' runs and
    the router in the result; `watch(sims, chooser)` is called with the replicas' runs and the
    router just before each routing decision (every replica stepped up to that arrival: the
    Cluster page's snapshots of the trees and of the router's own view)."""
    if router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    if not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas must be in [1, {MAX_REPLICAS:,}], got {replicas:,}")
    cfg = config or SimConfig()
    reqs = trace_reqs(trace)
    reps = [_Replica(build(trace, cfg, reqs=reqs)) for _ in range(replicas)]
    bs = block_size or route_block_size(trace)
    index = None
    if router == "kv-overlap":
        cap = None if cfg.capacity is None else max(1, cfg.capacity // bs)
        index = KeyIndex(replicas, bs, cap)
    chooser = make_router(router, replicas, block_size=bs, seed=cfg.seed, index=index,
                          config=router_config)
    keys: dict[int, tuple[int, ...]] = {}
    if index is not None:
        for rank, rep in enumerate(reps):
            _publish_prefills(rep.sim, rank, index, keys)
    decisions: list[tuple[str, int, str]] = []
    reasons: Counter[str] = Counter()
    with fewer_collections():
        _drive(reps, reqs, chooser, bs, keys, decisions if keep_decisions else None, reasons,
               on_route, watch)
    result = _result(reps, reqs, router, cfg, decisions, reasons)
    if keep_state:
        result.sims, result.chooser = [rep.sim for rep in reps], chooser
    return result


def _drive(reps: list[_Replica], reqs: list[Req], chooser: Any, bs: int,
           keys: dict[int, tuple[int, ...]], decisions: list | None, reasons: Counter,
           on_route: Any, watch: Any = None) -> None:
    ff = reps[0].sim.config.fast_forward
    i, n = 0, len(reqs)
    while True:
        a = reqs[i].arrival if i < n else float("inf")
        behind = [(rep.sim.clock.now, k) for k, rep in enumerate(reps)
                  if rep.sim.sched.has_work and rep.sim.clock.now < a]
        if behind:
            _step(reps[min(behind)[1]], a if ff else None)
            continue
        if i == n:
            return
        req = reqs[i]
        if watch is not None:
            watch([rep.sim for rep in reps], chooser)
        loads = [Load(len(rep.in_flight), sum(rep.in_flight.values())) for rep in reps]
        rr = RouteRequest(req.rid, block_keys(req.origin_input_ids, bs, _namespace(req)),
                          len(req.origin_input_ids), session_of(req.rid),
                          output_len=req.max_new_tokens)
        decision: Decision = chooser.route(rr, loads, a)
        keys[id(req)] = rr.block_keys
        reasons[decision.reason] += 1
        if decisions is not None:
            decisions.append((req.rid, decision.rank, decision.reason))
        if on_route is not None:
            on_route(req, decision, loads)
        _admit(reps[decision.rank], req, a)
        i += 1


def _namespace(req: Req) -> Any:
    return (req.extra_key, req.cache_salt) if req.extra_key or req.cache_salt else None


def _admit(rep: _Replica, req: Req, arrival: float) -> None:
    sim = rep.sim
    if not sim.sched.has_work and sim.clock.now < arrival:
        sim.clock.now = arrival  # idle until this arrival, as `simulate` jumps
    try:
        sim.sched.add_request(req)
    except ValueError as exc:  # the pool can never hold it: skipped, counted, said
        sim.rejected.append(str(exc))
        sim.rejected_input_tokens += len(req.origin_input_ids)
        return
    rep.in_flight[id(req)] = len(req.origin_input_ids) + req.max_new_tokens


def _step(rep: _Replica, until: float | None) -> None:
    sim = rep.sim
    before = sim.clock.now
    sim.sched.step(until)
    sim.num_steps += 1
    rep.busy += sim.clock.now - before
    finished = sim.sched.finished
    for r in finished[rep.cursor:]:
        rep.in_flight.pop(id(r), None)
    rep.cursor = len(finished)


def _publish_prefills(sim: SimRun, rank: int, index: KeyIndex,
                      keys: dict[int, tuple[int, ...]]) -> None:
    """The replica's runner tells the index of each prompt whose prefill it finished (the
    BlockStored events a real replica publishes as its blocks fill)."""
    runner = sim.sched.runner
    extend = runner.extend

    def extend_and_publish(batch: list[Req], prefix_lens: list[int]) -> Any:
        out = extend(batch, prefix_lens)
        for r in batch:
            if len(r.fill_ids) >= len(r.origin_input_ids):
                index.stored(rank, keys.get(id(r), ()))
        return out

    runner.extend = extend_and_publish  # NOTE: on this instance only


def _result(reps: list[_Replica], reqs: list[Req], router: str, cfg: SimConfig,
            decisions: list, reasons: Counter) -> ClusterResult:
    per, all_rows, scheds, shadows = [], {}, [], []
    for rep in reps:
        sim = rep.sim
        done = {id(r) for r in sim.sched.finished}
        rows = [_row(r) for r in reqs if id(r) in done]
        totals = _totals(rows, sim.sched, sim.shadow, cfg, sim.clock.now)
        totals["rejected"] = len(sim.rejected)
        _rates_over_all(totals, sim.rejected_input_tokens)
        totals["busy_s"] = rep.busy
        per.append(totals)
        all_rows.update((id(r), row) for r, row in zip((r for r in reqs if id(r) in done), rows))
        scheds.append(sim.sched)
        shadows.append(sim.shadow)
    rows = [all_rows[id(r)] for r in reqs if id(r) in all_rows]
    totals = _totals(rows, _sum_sched(scheds), _sum_shadow(shadows), cfg,
                     max(rep.sim.clock.now for rep in reps))
    totals["rejected"] = sum(t["rejected"] for t in per)
    _rates_over_all(totals, sum(t["rejected_input_tokens"] for t in per))
    busy = [t["busy_s"] for t in per]
    mean_busy = sum(busy) / len(busy)
    totals["load_spread"] = max(busy) / mean_busy if mean_busy else 1.0
    out_tokens = sum(r.decode_tokens for r in rows)
    span = totals["makespan_s"]
    totals["throughput_tok_s"] = (totals["input_tokens"] + out_tokens) / span if span else 0.0
    return ClusterResult(len(reps), router, totals, per, decisions, dict(sorted(reasons.items())))


def _sum_sched(scheds: list[Any]) -> Any:
    return SimpleNamespace(evicted_tokens=sum(s.evicted_tokens for s in scheds),
                           num_retracted=sum(s.num_retracted for s in scheds),
                           notices=[x for s in scheds for x in s.notices])


def _sum_shadow(shadows: list[Any]) -> Any:
    if shadows[0] is None:
        return None
    unreachable = sum(s.num_unreachable_blocks() for s in shadows)
    return SimpleNamespace(num_evictions=sum(s.num_evictions for s in shadows),
                           num_unreachable_blocks=lambda: unreachable,
                           dropped=[x for s in shadows for x in s.dropped])
