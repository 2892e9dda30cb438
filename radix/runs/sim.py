"""The simulated engine: the real scheduler loop and caches, with a cost model instead of a model.

`simulate` replays a trace (arrivals, prompts, output lengths) through the scheduler priced by
`SimRunner` (simrunner.py) and reports per-request TTFT, matched and prefilled tokens, totals;
vLLM's block cache (`BlockShadow`, shadow.py) sees the same requests at the same capacity. All in
real tokens, exactly: Mooncake traces stay compact (radix/tokens/) and decode runs between events
go at once (radix/sched/span.py). With `model` a hybrid preset (sliding-window or Mamba layers),
the tree is SGLang 0.5.23's component tree sized as SGLang sizes it (radix/models/sglang.py,
radix/tree/hybrid_args.py) and the scheduler drives it as SGLang does (radix/sched/hybrid.py);
no block shadow (vLLM's hybrid cache is radix/blocks/kv_cache_manager.py), no fast-forward.
Leaves out: output text, network and queueing delays.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from radix.events import EventSink
from radix.models.config import load_preset
from radix.models.sglang import sglang_shape
from radix.request import Req, SlotAllocator
from radix.runs.compare import fewer_collections
from radix.runs.costs import CostModel
from radix.runs.shadow import BlockShadow
from radix.runs.simrunner import OUTPUT_TOKEN_BASE, SimClock, SimRunner
from radix.runs.workers import fork_map
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.traces.trace import Trace, is_compact_trace, output_tokens, trace_reqs
from radix.tree.hybrid_args import HybridServerArgs, build_hybrid_cache
from radix.tree.hybrid_lifecycle import mamba_tracking_slots
from radix.tree.radix_cache import RadixCache

__all__ = ["BlockShadow", "CONFIGS", "OUTPUT_TOKEN_BASE", "RequestRow", "SimClock", "SimConfig",
           "SimResult", "SimRunner", "build", "hybrid_summary", "simulate", "simulate_many"]

@dataclass(frozen=True)
class SimConfig:
    policy: str = "lpm"  # schedule policy (radix.sched.policy.POLICIES)
    eviction: str = "lru"  # tree eviction policy (radix.tree.evict_policy.POLICIES)
    page_size: int = 1  # tree page size, real tokens
    capacity: int | None = None  # KV pool size, real tokens; None: room for the whole trace
    max_prefill_tokens: int = 16384  # per-round input budget, real tokens
    chunked_prefill_size: int | None = None  # real tokens; None: no chunking
    disable_cache: bool = False  # every match empty (SGLang's ChunkCache)
    block_size: int = 16  # the shadow block cache's block size, real tokens
    shadow: bool = True  # run vLLM's block cache on the same requests
    cost: CostModel = field(default_factory=CostModel)
    seed: int = 0
    fast_forward: bool = True  # decode runs between events at once (same results; False: the
    #                            one-step loop, for tests that hold the two equal)
    model: str | None = None  # a preset name or config.json (radix/models/); a hybrid one runs
    #                           on SGLang's component tree, its pools split from kv_memory
    kv_memory: int | None = None  # bytes for a hybrid model's KV; None: room for the trace
    sglang: HybridServerArgs | None = None  # its SGLang flags (page, policy, pools: from above)

    def __post_init__(self) -> None:
        for name in ("page_size", "max_prefill_tokens", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"SimConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.chunked_prefill_size is not None and self.chunked_prefill_size < 1:
            raise ValueError(f"SimConfig.chunked_prefill_size must be >= 1 or None, "
                             f"got {self.chunked_prefill_size}")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"SimConfig.capacity must be >= 1 or None, got {self.capacity}")


# DESIGN.md's four server configurations: (name, SimConfig overrides)
CONFIGS = (
    ("fcfs+lru+page1", {"policy": "fcfs", "eviction": "lru", "page_size": 1}),
    ("lpm+slru", {"policy": "lpm", "eviction": "slru", "page_size": 1}),
    ("page16", {"policy": "fcfs", "eviction": "lru", "page_size": 16}),
    ("no-cache", {"policy": "fcfs", "eviction": "lru", "page_size": 1, "disable_cache": True}),
)


class RequestRow(NamedTuple):
    rid: str
    arrival: float  # s
    ttft: float  # s, simulated
    input_tokens: int  # real tokens
    matched_tokens: int  # real tokens reused from the tree at first admission
    prefilled_tokens: int  # real tokens computed, re-prefills after retraction included
    decode_tokens: int
    block_matched_tokens: int | None  # the block cache's hit, real tokens (None: no shadow)


@dataclass
class SimResult:
    rows: list[RequestRow]
    totals: dict[str, Any]  # see `simulate`
    notices: list[str]  # LPM fallback notices
    rejected: list[str] = field(default_factory=list)  # why each rejected request was
    rejected_input_tokens: int = 0  # the rejected requests' prompt tokens


@dataclass
class SimRun:
    """A simulation ready to drive (`build`), and its state while `run` drives it."""

    trace: Trace
    config: SimConfig
    reqs: list[Req]  # in arrival order
    clock: SimClock
    tree: RadixCache
    shadow: BlockShadow | None
    sched: Scheduler
    rejected: list[str] = field(default_factory=list)  # why each rejected request was
    rejected_input_tokens: int = 0  # the rejected requests' prompt tokens
    num_steps: int = 0  # scheduler steps taken (a fast-forwarded span counts once)


def build(trace: Trace, config: SimConfig | None = None, *,
          kv_sink: EventSink | None = None, record_evictions: bool = False,
          extent_shadow: bool | None = None, reqs: list[Req] | None = None) -> SimRun:
    """The scheduler, tree, pool and shadow for `trace`, in real tokens. Compact (Mooncake)
    traces get a SlotAllocator of runs and the block-extent shadow (`extent_shadow` forces it
    either way; `record_evictions` keeps its eviction marks); `kv_sink` hears what the tree stores
    and evicts (the explainer's probe). `reqs`: the trace's requests (`trace_reqs`) when the
    caller made them (the cluster's replicas share one list)."""
    cfg = config or SimConfig()
    reqs = trace_reqs(trace) if reqs is None else reqs
    compact = is_compact_trace(trace)
    outputs = {r.rid: output_tokens(trace, k) for k, r in enumerate(reqs)}
    page = cfg.page_size
    if cfg.model is not None:
        preset = load_preset(cfg.model)
        if preset.is_hybrid:
            return _build_hybrid(trace, cfg, reqs, outputs, preset)
    # unbounded: room for every token of every request at once, nothing ever freed (so no
    # eviction and no retraction), past admission's strict `>=` (hence + 1)
    capacity = cfg.capacity or -(-(_room(reqs, page) + 1) // page) * page  # whole pages
    clock = SimClock()
    # paged as the tree: admission counts pages (SGLang 0.5.23), so must the pool
    allocator = SlotAllocator(capacity, page_size=page, runs=compact)
    tree = RadixCache(page_size=page, eviction_policy=cfg.eviction,
                      disable=cfg.disable_cache, allocator=allocator, kv_sink=kv_sink)
    shadow = None
    if cfg.shadow:  # vLLM preallocates every block: past what the trace can use, none matter
        block = cfg.block_size
        usable = _room(reqs, block) + block
        if cfg.capacity is not None:  # unbounded: whole blocks for every request at once
            usable = min(capacity, usable)
        shadow = BlockShadow(usable, block, not cfg.disable_cache,
                             compact=compact if extent_shadow is None else extent_shadow,
                             record_evictions=record_evictions)
    sched_cfg = SchedulerConfig(policy=cfg.policy, max_prefill_tokens=cfg.max_prefill_tokens,
                                chunked_prefill_size=cfg.chunked_prefill_size, seed=cfg.seed)
    sched = Scheduler(SimRunner(cfg.cost, clock, outputs), tree, allocator, sched_cfg,
                      clock=clock, shadow=shadow)
    return SimRun(trace, cfg, reqs, clock, tree, shadow, sched)


def _build_hybrid(trace: Trace, cfg: SimConfig, reqs: list[Req], outputs: dict,
                  preset: Any) -> SimRun:
    """The component tree for a hybrid preset over pools SGLang would size from `kv_memory`
    (hybrid_args.pool_sizes); None: room for every token (the full pool), for every state a
    request keeps (Mamba: its working and tracking slots, a state per chunk and two more) and
    the SWA pool at swa_full_tokens_ratio of the full one."""
    if cfg.capacity is not None:
        raise ValueError("SimConfig.capacity counts one full-attention cache; a hybrid model's "
                         "pools come from kv_memory")
    shape, page = sglang_shape(preset), cfg.page_size
    args = replace(cfg.sglang or HybridServerArgs(), page_size=page,
                   radix_eviction_policy=cfg.eviction)
    if cfg.kv_memory is None:
        chunk = cfg.chunked_prefill_size
        args = replace(args, max_total_num_tokens=-(-(_room(reqs, page) + 1) // page) * page,
                       max_mamba_cache_size=sum(
                           6 + (-(-len(r.origin_input_ids) // chunk) if chunk else 0)
                           for r in reqs) if shape.has_mamba else None)
    cache, knobs = build_hybrid_cache(shape, args, cfg.kv_memory)
    cache.disable = cfg.disable_cache
    clock = SimClock()
    sched_cfg = SchedulerConfig(policy=cfg.policy, max_prefill_tokens=cfg.max_prefill_tokens,
                                chunked_prefill_size=cfg.chunked_prefill_size, seed=cfg.seed)
    sched = Scheduler(SimRunner(cfg.cost, clock, outputs), cache, cache.allocator, sched_cfg,
                      clock=clock, knobs=knobs)
    return SimRun(trace, cfg, reqs, clock, cache, None, sched)


def hybrid_summary(sim: SimRun) -> dict[str, Any] | None:
    """What a hybrid run's tree was (components, pools, SGLang's settings); None for a
    RadixCache.

    >>> from radix.traces.trace import Trace, TraceRequest
    >>> t = Trace("request", [TraceRequest("a", 0.0, list(range(40)), 4)])
    >>> h = hybrid_summary(build(t, SimConfig(model="gpt-oss-20b", kv_memory=1 << 30)))
    >>> h["full_pool"], h["swa_pool"]  # 1 GiB / (24,576 + 0.8 x 24,576 B) full tokens
    (24272, 19417)
    """
    cache = sim.tree
    if not hasattr(cache, "req_states"):
        return None
    a, knobs = cache.allocator, sim.sched.hybrid.knobs
    out: dict[str, Any] = {"model": sim.config.model,
                           "components": [str(c) for c in cache.tree_components],
                           "full_pool": a.full.size if cache.is_swa_enabled else a.size}
    if cache.is_swa_enabled:
        out.update(swa_pool=a.swa.size, sliding_window_size=cache.sliding_window_size,
                   swa_eviction_interval=knobs.swa_eviction_interval)
    if cache.is_mamba_enabled:
        out.update(mamba_state_slots=cache.mamba_pool.size,
                   mamba_strategy="extra_buffer" if cache.enable_mamba_extra_buffer
                   else "no_buffer",
                   tracking_slots_per_request=mamba_tracking_slots(cache, knobs),
                   max_running_requests=sim.sched.max_running_requests)
    return out


def run(sim: SimRun, on_arrival: Any = None) -> SimResult:
    """Drives `sim` to the end: arrivals join when the clock reaches them, steps until no work
    is left. `on_arrival(req)` sees each request as it arrives (before it is queued)."""
    with fewer_collections():
        return _run(sim, on_arrival)


def _run(sim: SimRun, on_arrival: Any) -> SimResult:
    sched, clock, reqs = sim.sched, sim.clock, sim.reqs
    ff = sim.config.fast_forward
    i = 0
    while i < len(reqs) or sched.has_work:
        while i < len(reqs) and reqs[i].arrival <= clock.now:
            if on_arrival is not None:
                on_arrival(reqs[i])
            try:
                sched.add_request(reqs[i])
            except ValueError as exc:  # the pool can never hold it: skipped, counted, said
                sim.rejected.append(str(exc))
                sim.rejected_input_tokens += len(reqs[i].origin_input_ids)
            i += 1
        if not sched.has_work:
            if i == len(reqs):  # the last arrivals were rejected
                break
            clock.now = reqs[i].arrival
            continue
        until = (reqs[i].arrival if i < len(reqs) else float("inf")) if ff else None
        sched.step(until)
        sim.num_steps += 1
    run_ids = {id(r) for r in sched.finished}
    rows = [_row(r) for r in reqs if id(r) in run_ids]
    totals = _totals(rows, sched, sim.shadow, sim.config, clock.now)
    totals["rejected"] = len(sim.rejected)
    _rates_over_all(totals, sim.rejected_input_tokens)
    return SimResult(rows, totals, list(sched.notices), list(sim.rejected))


def simulate(trace: Trace, config: SimConfig | None = None) -> SimResult:
    """Replays `trace` through the scheduler, the tree and (optionally) the block cache.

    A request the pool could never admit (Scheduler.add_request) is left out of the rows,
    counted in totals["rejected"] and explained in `SimResult.rejected`.
    Totals: requests (run), rejected, input_tokens, matched_tokens, hit_rate (matched / input),
    rejected_input_tokens, hit_rate_all (matched / every prompt token, the rejected included),
    prefilled_tokens,
    prefill_seconds (derived), makespan_s, ttft_mean_s / ttft_p50_s / ttft_p99_s, evicted_tokens,
    retractions, fallbacks, and with the shadow block_matched_tokens, block_hit_rate,
    block_hit_rate_all,
    block_evictions, unreachable_blocks, block_dropped.
    """
    return run(build(trace, config))


def simulate_many(trace: Trace, configs: Sequence[tuple[str, SimConfig]], jobs: int = 1
                  ) -> list[tuple[str, SimResult]]:
    """`simulate` under each named configuration, in order. jobs > 1: that many forked worker
    processes (they inherit the loaded trace; a run is single-threaded Python, so the four
    configurations of `configs` on two cores take about half the wall time). Where fork is
    not offered (not Linux), one after the other."""
    global _FORKED
    _FORKED = (trace, list(configs))
    try:
        results = fork_map(_simulate_forked, len(configs), jobs)
    finally:
        _FORKED = None
    return [(name, res) for (name, _), res in zip(configs, results, strict=True)]


_FORKED: tuple[Trace, list[tuple[str, SimConfig]]] | None = None  # what forked workers read


def _simulate_forked(i: int) -> SimResult:
    trace, configs = _FORKED
    return simulate(trace, configs[i][1])


def _room(reqs: list[Req], page: int) -> int:
    """Slots for every prompt and every output token, and a page each.

    >>> _room([Req("a", [1, 2, 3], max_new_tokens=5000)], 16)  # 3 + 5,000 + 16
    5019
    """
    return sum(len(r.origin_input_ids) + r.max_new_tokens + page for r in reqs)


def _row(r: Req) -> RequestRow:
    m = r.metrics
    block = m.get("block_matched_tokens")
    return RequestRow(r.rid, r.arrival, m.get("ttft", float("nan")), len(r.origin_input_ids),
                      int(m.get("matched_tokens", 0)), int(m.get("prefilled_tokens", 0)),
                      int(m.get("decode_tokens", 0)), None if block is None else int(block))


def _rates_over_all(totals: dict[str, Any], rejected_input_tokens: int) -> None:
    """The hit rates over every prompt token of the trace, the rejected requests' included
    (`hit_rate` and `block_hit_rate` count the admitted requests' prompts only).

    >>> t = {"input_tokens": 80, "matched_tokens": 40, "block_matched_tokens": 32}
    >>> _rates_over_all(t, 20); t["hit_rate_all"], t["block_hit_rate_all"]  # 40/100, 32/100
    (0.4, 0.32)
    """
    every = max(totals["input_tokens"] + rejected_input_tokens, 1)
    totals["rejected_input_tokens"] = rejected_input_tokens
    totals["hit_rate_all"] = totals["matched_tokens"] / every
    if "block_matched_tokens" in totals:
        totals["block_hit_rate_all"] = totals["block_matched_tokens"] / every


def _totals(rows: list[RequestRow], sched: Scheduler, shadow: BlockShadow | None,
            cfg: SimConfig, makespan: float) -> dict[str, Any]:
    input_tokens = sum(r.input_tokens for r in rows)
    prefilled = sum(r.prefilled_tokens for r in rows)
    ttfts = sorted(r.ttft for r in rows)
    out: dict[str, Any] = {
        "requests": len(rows), "input_tokens": input_tokens,
        "matched_tokens": sum(r.matched_tokens for r in rows),
        "hit_rate": sum(r.matched_tokens for r in rows) / max(input_tokens, 1),
        "prefilled_tokens": prefilled,
        "prefill_seconds": cfg.cost.prefill_seconds(prefilled),
        "makespan_s": makespan,
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else 0.0,
        "ttft_p50_s": ttfts[len(ttfts) // 2] if ttfts else 0.0,
        "ttft_p99_s": ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))] if ttfts else 0.0,
        "evicted_tokens": sched.evicted_tokens,
        "retractions": sched.num_retracted, "fallbacks": len(sched.notices),
        "cost_label": cfg.cost.label,
    }
    if shadow is not None:
        block = sum(r.block_matched_tokens or 0 for r in rows)
        out.update(block_matched_tokens=block, block_hit_rate=block / max(input_tokens, 1),
                   block_evictions=shadow.num_evictions,
                   unreachable_blocks=shadow.num_unreachable_blocks(),
                   block_dropped=len(shadow.dropped))
    return out
