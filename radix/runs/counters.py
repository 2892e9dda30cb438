"""The hit rates vLLM and SGLang would log for a trace, beside RadixLens's own.

vLLM 0.33 (vllm/v1/metrics/stats.py): `PrefixCacheStats.record(num_tokens, num_hits,
preempted)` per admitted lookup (v1/core/kv_cache_manager.py `record_prefix_cache_stats`,
num_tokens = prompt + output so far); a re-lookup after preemption goes to preempted_* only.
Each step's stats go to `CachingMetrics.observe` (v1/metrics/loggers.py `LoggingStatLogger`),
a window over the most recent max_recent_requests=1000 requests (whole steps; the newest always
kept); the log line's "Prefix cache hit rate" is its `hit_rate`, token-weighted.
SGLang 0.5.23 (srt/managers/schedule_policy.py `PrefillAdder._update_prefill_budget`,
scheduler_components/metrics_reporter.py `report_prefill_stats`): per prefill batch,
#cached-token = sum of prefix_len at admission (a chunked request's later chunks count 0:
`add_chunked_req` passes prefix_len 0), #new-token = the extend lengths; cache_hit_rate =
effective hit / (effective new + effective hit), where "effective" drops requests retracted
before (`retracted_stain`). The gauge is the last batch's.
Leaves out: connector (external) hit rates; SGLang's time-windowed recent_cache_hit_rate.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

from radix.request import Req
from radix.runs.sim import SimConfig, build, run
from radix.traces.trace import Trace


class StepStats(NamedTuple):
    """vLLM's PrefixCacheStats of one scheduler step (the fields the logger reads)."""

    requests: int
    queries: int
    hits: int
    preempted_requests: int
    preempted_queries: int
    preempted_hits: int


class SlidingHitRate:
    """vLLM's CachingMetrics: hit rate over the most recent `max_recent_requests` requests.

    >>> m = SlidingHitRate(max_recent_requests=2)
    >>> for s in [(1, 100, 0), (1, 100, 50), (1, 100, 100)]: m.observe(*s)
    >>> m.hit_rate  # the first step fell out: (50 + 100) / 200
    0.75
    """

    def __init__(self, max_recent_requests: int = 1000) -> None:
        self.max_recent_requests = max_recent_requests
        self.requests = self.queries = self.hits = 0
        self.window: deque[tuple[int, int, int]] = deque()

    def observe(self, requests: int, queries: int, hits: int) -> None:
        if requests == 0:  # vLLM: empty stats are not appended
            return
        self.window.append((requests, queries, hits))
        self.requests += requests
        self.queries += queries
        self.hits += hits
        while len(self.window) > 1 and self.requests > self.max_recent_requests:
            r, q, h = self.window.popleft()
            self.requests -= r
            self.queries -= q
            self.hits -= h

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class PrefillBatch(NamedTuple):
    """One SGLang prefill log line."""

    new_tokens: int  # #new-token: extend lengths
    cached_tokens: int  # #cached-token: prefix lengths
    reprocessed_new: int  # of those, from requests retracted before
    reprocessed_cached: int

    @property
    def cache_hit_rate(self) -> float:
        hit = self.cached_tokens - self.reprocessed_cached
        total = self.new_tokens - self.reprocessed_new + hit
        return hit / total if total else 0.0


class Lookup(NamedTuple):
    """One admitted block lookup, as vLLM's record_prefix_cache_stats sees it."""

    step: int  # simulator step (vLLM: the engine step whose stats it joins)
    num_tokens: int  # request.num_tokens: prompt + output so far
    num_hits: int  # tokens in cached blocks
    preempted: bool  # a re-lookup after the request was retracted (vLLM: preempted)


class EngineRates(NamedTuple):
    prompt_tokens: int
    rejected: int  # requests never admitted (too big for the pool): in no engine's counters
    tree_hit_rate: float  # RadixLens: first-admission hits / all prompt tokens
    block_hit_rate: float  # RadixLens: first-lookup block hits / all prompt tokens
    vllm_logged: float  # the "Prefix cache hit rate" vLLM's logger prints after the last step
    vllm_lifetime: float  # vLLM's hits / queries over the whole run (Prometheus counters)
    vllm_lookups: list[Lookup]  # in order
    vllm_steps: list[StepStats]  # per step with a lookup, in order
    vllm_window: list[float]  # the logged figure after each of those steps
    sglang_last_batch: float  # SGLang's cache_hit_rate gauge after the last prefill batch
    sglang_overall: float  # its batches summed: effective cached / (effective new + cached)
    sglang_batches: list[PrefillBatch]


class _Watch:
    def __init__(self, sim: Any) -> None:
        self.sim, self.looked_up = sim, set()
        self.lookups: list[Lookup] = []
        self.extended: dict[str, int] = {}  # rid -> its retractions at its last chunk
        self.batches: list[PrefillBatch] = []

    def on_lookup(self, req: Req, hit: Any) -> None:
        tokens = len(req.origin_input_ids) + len(req.output_ids)
        self.lookups.append(Lookup(self.sim.num_steps, tokens, hit.num_computed_tokens,
                                   req.rid in self.looked_up))
        self.looked_up.add(req.rid)


    def on_extend(self, reqs: list[Req], prefix_lens: list[int]) -> None:
        new = cached = re_new = re_cached = 0
        for req, p in zip(reqs, prefix_lens):
            n, retracted = len(req.fill_ids) - p, req.metrics.get("retractions", 0)
            if self.extended.get(req.rid) == retracted:  # a later chunk: SGLang logs 0 cached
                p = 0
            self.extended[req.rid] = retracted
            new, cached = new + n, cached + p
            if retracted:
                re_new, re_cached = re_new + n, re_cached + p
        self.batches.append(PrefillBatch(new, cached, re_new, re_cached))


def step_stats(lookups: list[Lookup]) -> list[StepStats]:
    """PrefixCacheStats.record over each step's lookups (a re-lookup: preempted_* only).

    >>> step_stats([Lookup(0, 10, 0, False), Lookup(0, 12, 8, True), Lookup(3, 10, 8, False)])
    [StepStats(requests=1, queries=10, hits=0, preempted_requests=1, preempted_queries=12, \
preempted_hits=8), StepStats(requests=1, queries=10, hits=8, preempted_requests=0, \
preempted_queries=0, preempted_hits=0)]
    """
    steps: dict[int, list[int]] = {}
    for x in lookups:
        s = steps.setdefault(x.step, [0] * 6)
        k = 3 if x.preempted else 0
        s[k], s[k + 1], s[k + 2] = s[k] + 1, s[k + 1] + x.num_tokens, s[k + 2] + x.num_hits
    return [StepStats(*steps[k]) for k in sorted(steps)]


class _Runner:
    def __init__(self, inner: Any, watch: _Watch) -> None:
        self.inner, self.watch = inner, watch

    def extend(self, reqs, prefix_lens):
        self.watch.on_extend(reqs, prefix_lens)
        return self.inner.extend(reqs, prefix_lens)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def engine_rates(trace: Trace, config: SimConfig | None = None,
                 max_recent_requests: int = 1000) -> EngineRates:
    """Runs `trace` in the simulator and counts as each engine does (module docstring).

    Two identical 40-token prompts, blocks of 16, one at a time: vLLM queries 80 tokens, hits
    32 (2 blocks: capped at 39 tokens); SGLang's second batch caches 39 of 40.
    >>> from radix.traces.trace import TraceRequest
    >>> t = Trace("request", [TraceRequest(r, a, tuple(range(40)), 2) for r, a in
    ...                       (("a", 0.0), ("b", 9.0))])
    >>> r = engine_rates(t)
    >>> r.vllm_logged, r.sglang_last_batch, r.tree_hit_rate
    (0.4, 0.975, 0.4875)
    """
    sim = build(trace, config or SimConfig())
    if sim.shadow is None:
        raise ValueError("engine_rates needs the block shadow (SimConfig.shadow=True)")
    watch = _Watch(sim)
    sim.shadow.on_lookup = watch.on_lookup
    sim.sched.runner = _Runner(sim.sched.runner, watch)
    totals = run(sim).totals
    prompt = sum(len(r.origin_input_ids) for r in sim.reqs) or 1
    window, series = SlidingHitRate(max_recent_requests), []
    steps = step_stats(watch.lookups)
    for s in steps:
        window.observe(s.requests, s.queries, s.hits)
        series.append(window.hit_rate)
    queries, hits = sum(s.queries for s in steps), sum(s.hits for s in steps)
    b = watch.batches
    eff_hit = sum(x.cached_tokens - x.reprocessed_cached for x in b)
    eff_all = sum(x.new_tokens - x.reprocessed_new for x in b) + eff_hit
    return EngineRates(
        prompt, totals["rejected"], totals["matched_tokens"] / prompt,
        totals.get("block_matched_tokens", 0) / prompt,
        window.hit_rate, hits / queries if queries else 0.0, watch.lookups, steps, series,
        b[-1].cache_hit_rate if b else 0.0, eff_hit / eff_all if eff_all else 0.0, b)
