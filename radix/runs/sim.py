"""The simulated engine: the real scheduler loop and caches, with a cost model instead of a model.

`SimRunner` prices each forward by `engine/costs.py` and advances a simulated clock; `simulate`
replays a trace (arrivals, prompts, output lengths) and reports per-request TTFT, matched and
prefilled tokens, and totals. vLLM's block cache (`BlockShadow`) sees the same requests at the
same capacity. Sizes in `SimConfig` are real tokens; a Mooncake trace (one unit token = 512 real
tokens) is run in units: budgets and capacity are divided by the scale, and one decode step of a
unit stands for `token_scale` real steps. Leaves out: output text, network and queueing delays.
"""

from __future__ import annotations

import statistics
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from radix.allocator import SlotAllocator
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import EventSink
from radix.request import Req
from radix.runs.costs import CostModel
from radix.sched.scheduler import Scheduler, SchedulerConfig, StepOutput, slots_to_admit
from radix.traces.base import Trace, to_req
from radix.tree.radix_cache import RadixCache

OUTPUT_TOKEN_BASE = 1 << 31  # generated tokens lie above every trace token id


class SimClock:
    """Simulated seconds; the runner advances it by each forward's priced time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SimRunner:
    """A `Runner` that computes nothing: it prices the step and emits a distinct fake token.

    >>> clock = SimClock(); r = Req("a", list(range(2000)), max_new_tokens=2)
    >>> r.fill_ids = r.all_ids; out = SimRunner(CostModel(), clock).extend([r], [0])
    >>> round(out.seconds, 4), out.next_token_ids[0] >= OUTPUT_TOKEN_BASE  # 2,000 / 22,036
    (0.0908, True)
    """

    def __init__(self, cost: CostModel, clock: SimClock, token_scale: int = 1) -> None:
        self.cost, self.clock, self.token_scale = cost, clock, token_scale

    def extend(self, reqs: list[Req], prefix_lens: list[int]) -> StepOutput:
        tokens = sum(len(r.fill_ids) - p for r, p in zip(reqs, prefix_lens))
        seconds = self.cost.prefill_seconds(tokens * self.token_scale)
        self.clock.now += seconds
        return StepOutput([self._token(r) if len(r.fill_ids) >= len(r.all_ids) else None
                           for r in reqs], seconds)

    def decode(self, reqs: list[Req]) -> StepOutput:
        context = sum(len(r.slot_ids) for r in reqs) * self.token_scale
        seconds = self.cost.decode_seconds(context) * self.token_scale
        self.clock.now += seconds
        return StepOutput([self._token(r) for r in reqs], seconds)

    @staticmethod
    def _token(req: Req) -> int:
        return OUTPUT_TOKEN_BASE + (zlib.crc32(req.rid.encode()) % 65536) * 32768 + (
            len(req.output_ids) % 32768)


class BlockShadow:
    """vLLM's block-hash cache on the same requests: look up at each (re)admission, allocate the
    chunk, one token per decode step, free at finish or retraction. A request the pool cannot
    hold is dropped from the shadow and counted (vLLM would preempt it)."""

    def __init__(self, capacity_tokens: int, block_size: int = 16, enable_caching: bool = True,
                 sink: EventSink | None = None) -> None:
        pool = BlockPool(max(capacity_tokens // block_size, 1) + 1, block_size, enable_caching,
                         sink=sink)
        self.manager = BlockCacheManager(pool)
        self.computed: dict[str, int] = {}  # rid -> tokens the shadow holds KV for
        self.dropped: set[str] = set()  # rids the pool could not hold
        self.hit_tokens = 0

    def on_prefill(self, req: Req, extend_len: int) -> None:
        if req.rid in self.dropped:
            return
        if req.rid not in self.computed:
            hit = self.manager.get_computed_blocks(req)
            req.metrics.setdefault("block_matched_tokens", hit.num_computed_tokens)
            self.hit_tokens += hit.num_computed_tokens
            new = max(len(req.fill_ids) - hit.num_computed_tokens, 0)
            self._allocate(req, new, hit)
        else:
            self._allocate(req, max(len(req.fill_ids) - self.computed[req.rid], 0), None)

    def on_decode(self, req: Req) -> None:
        if req.rid in self.computed:
            self._allocate(req, 1, None)

    def on_release(self, req: Req) -> None:
        if self.computed.pop(req.rid, None) is not None:
            self.manager.free(req)

    def _allocate(self, req: Req, num_new: int, hit: Any) -> None:
        if self.manager.allocate_slots(req, num_new, hit) is None:
            self.manager.free(req)
            self.computed.pop(req.rid, None)
            self.dropped.add(req.rid)
            return
        start = hit.num_computed_tokens if hit is not None else self.computed[req.rid]
        self.computed[req.rid] = start + num_new


@dataclass(frozen=True)
class SimConfig:
    policy: str = "lpm"  # schedule policy (radix.sched.policy.POLICIES)
    eviction: str = "lru"  # tree eviction policy (radix.tree.eviction)
    page_size: int = 1  # tree page size, real tokens
    capacity: int | None = None  # KV pool size, real tokens; None: room for the whole trace
    max_prefill_tokens: int = 16384  # per-round input budget, real tokens
    chunked_prefill_size: int | None = None  # real tokens; None: no chunking
    disable_cache: bool = False  # every match empty (SGLang's ChunkCache)
    block_size: int = 16  # the shadow block cache's block size, real tokens
    shadow: bool = True  # run vLLM's block cache on the same requests
    cost: CostModel = field(default_factory=CostModel)
    seed: int = 0

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


def _units(real: int | None, scale: int) -> int | None:
    return None if real is None else max(real // scale, 1)


def simulate(trace: Trace, config: SimConfig | None = None) -> SimResult:
    """Replays `trace` through the scheduler, the tree and (optionally) the block cache.

    A request the pool could never admit (Scheduler.add_request) is left out of the rows,
    counted in totals["rejected"] and explained in `SimResult.rejected`.
    Totals: requests (run), rejected, input_tokens, matched_tokens, hit_rate (matched / input),
    prefilled_tokens,
    prefill_seconds (derived), makespan_s, ttft_mean_s / ttft_p50_s / ttft_p99_s, evicted_tokens,
    retractions, fallbacks, and with the shadow block_matched_tokens, block_hit_rate,
    block_evictions, unreachable_blocks, block_dropped.
    """
    cfg = config or SimConfig()
    scale = trace.token_scale
    reqs = [to_req(tr) for tr in trace.requests]
    for r in reqs:  # output_len is in real tokens; in units a decode step is `scale` tokens
        r.max_new_tokens = max(-(-r.max_new_tokens // scale), 1)
    page = _units(cfg.page_size, scale)
    # room for every request at once, past admission's strict `>=` (hence + 1)
    capacity = _units(cfg.capacity, scale) or sum(slots_to_admit(r, page) for r in reqs) + 1
    clock, allocator = SimClock(), SlotAllocator(capacity)
    tree = RadixCache(page_size=page, eviction_policy=cfg.eviction,
                      disable=cfg.disable_cache, allocator=allocator)
    shadow = None
    if cfg.shadow:  # vLLM preallocates every block: past what the trace can use, none matter
        block = _units(cfg.block_size, scale)
        usable = sum(slots_to_admit(r, block) for r in reqs) + block
        if cfg.capacity is not None:  # unbounded: whole blocks for every request at once
            usable = min(capacity, usable)
        shadow = BlockShadow(usable, block, not cfg.disable_cache)
    sched_cfg = SchedulerConfig(
        policy=cfg.policy, max_prefill_tokens=_units(cfg.max_prefill_tokens, scale),
        chunked_prefill_size=_units(cfg.chunked_prefill_size, scale), seed=cfg.seed)
    sched = Scheduler(SimRunner(cfg.cost, clock, scale), tree, allocator, sched_cfg,
                      clock=clock, shadow=shadow)
    i, rejected = 0, []
    while i < len(reqs) or sched.has_work:
        while i < len(reqs) and reqs[i].arrival <= clock.now:
            try:
                sched.add_request(reqs[i])
            except ValueError as exc:  # the pool can never hold it: skipped, counted, said
                rejected.append(str(exc))
            i += 1
        if not sched.has_work:
            if i == len(reqs):  # the last arrivals were rejected
                break
            clock.now = reqs[i].arrival
            continue
        sched.step()
    run = {id(r) for r in sched.finished}
    rows = [_row(trace, k, r) for k, r in enumerate(reqs) if id(r) in run]
    totals = _totals(rows, sched, shadow, cfg, clock.now, scale)
    totals["rejected"] = len(rejected)
    return SimResult(rows, totals, list(sched.notices), rejected)


def _row(trace: Trace, k: int, r: Req) -> RequestRow:
    scale, m = trace.token_scale, r.metrics
    real_input = trace.input_lens[k] if trace.input_lens else len(r.origin_input_ids) * scale
    matched_units = int(m.get("matched_tokens", 0))
    matched = min(matched_units * scale, real_input)
    extra_units = int(m.get("prefilled_tokens", 0)) - (len(r.origin_input_ids) - matched_units)
    block = m.get("block_matched_tokens")
    return RequestRow(r.rid, r.arrival, m.get("ttft", float("nan")), real_input, matched,
                      real_input - matched + extra_units * scale,
                      int(m.get("decode_tokens", 0)) * scale,
                      None if block is None else min(int(block) * scale, real_input))


def _totals(rows: list[RequestRow], sched: Scheduler, shadow: BlockShadow | None,
            cfg: SimConfig, makespan: float, scale: int) -> dict[str, Any]:
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
        "evicted_tokens": sched.evicted_tokens * scale,
        "retractions": sched.num_retracted, "fallbacks": len(sched.notices),
        "cost_label": cfg.cost.label,
    }
    if shadow is not None:
        block = sum(r.block_matched_tokens or 0 for r in rows)
        out.update(block_matched_tokens=block, block_hit_rate=block / max(input_tokens, 1),
                   block_evictions=shadow.manager.pool.num_evictions,
                   unreachable_blocks=shadow.manager.num_unreachable_blocks(),
                   block_dropped=len(shadow.dropped))
    return out
