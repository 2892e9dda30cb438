"""Differential check of radix.runs.counters against vLLM's own metrics code (not a test).

Loads vllm/v1/metrics/stats.py from an unpacked vLLM wheel (checked with 0.33.0), stubbing what
it imports, and replays the block lookups of a simulated run of each example trace (and of a
pool 1.5 times the largest request, and of a small pool that retracts, so that
preempted re-lookups occur) through vLLM's
`PrefixCacheStats.record` (one per lookup) and `CachingMetrics.observe` (one per step), beside
ours (`step_stats`, `SlidingHitRate`), with vLLM's default window (1000 requests) and small ones
(1, 3, 7) that make it slide. Compared after every step: the step's requests / queries / hits /
preempted_* and the logged hit rate (exact float equality). The lookups themselves come from
our block cache, which tools/diff_vllm.py checks against vLLM's KV cache manager.

    python tools/diff_vllm_metrics.py /tmp/vllm/ex
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wheels import load, packages, run_seeds, stub, wheel_args, wheel_parser  # noqa: E402

from radix.runs.counters import SlidingHitRate, engine_rates, step_stats  # noqa: E402
from radix.runs.sim import SimConfig  # noqa: E402
from radix.traces import Trace, TraceRequest, load_trace  # noqa: E402

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces"
WINDOWS = (1000, 1, 3, 7)


def load_vllm_stats(root: Path):
    packages("vllm", "vllm.v1", "vllm.v1.metrics", "vllm.compilation", "vllm.v1.spec_decode")
    stub("vllm.envs")
    stub("vllm.logger", init_logger=logging.getLogger)
    for name in ("vllm.compilation.cuda_graph", "vllm.v1.metrics.cache_hit_source",
                 "vllm.v1.metrics.perf", "vllm.v1.spec_decode.metrics"):
        stub(name)
    return load("vllm.v1.metrics.stats", root / "vllm/v1/metrics/stats.py")


def retracting_trace() -> Trace:
    """Four 80-token prompts wanting 60 outputs in a 400-token pool: decode retracts one."""
    return Trace("request", [TraceRequest(f"q{i}", 0.0, tuple(range(i * 1000, i * 1000 + 80)),
                                          60) for i in range(4)])


def cases() -> list[tuple[str, Trace, SimConfig]]:
    out = [("retracting (capacity 400)", retracting_trace(),
            SimConfig(capacity=400, max_prefill_tokens=10**6, policy="fcfs"))]
    for path in sorted(TRACES.glob("*.jsonl*")):
        if "kv_events" in path.name:
            continue
        trace = load_trace(path)
        out.append((path.name, trace, SimConfig(policy="fcfs")))
        # a pool 1.5 times the largest request: every request fits, the pool evicts and retracts
        tight = max(len(r.token_ids) * trace.token_scale + r.output_len
                    for r in trace.requests) * 3 // 2
        out.append((f"{path.name} (capacity {tight:,})", trace,
                    SimConfig(policy="fcfs", capacity=tight)))
    return out


def check(vllm_stats, name: str, trace: Trace, cfg: SimConfig) -> int:
    """Steps compared for one trace; raises AssertionError at the first difference."""
    rates = engine_rates(trace, cfg)
    groups: dict[int, list] = {}
    for x in rates.vllm_lookups:
        groups.setdefault(x.step, []).append(x)
    ours_steps = step_stats(rates.vllm_lookups)
    compared = 0
    for window in WINDOWS:
        theirs, ours = vllm_stats.CachingMetrics(window), SlidingHitRate(window)
        for (step, lookups), mine in zip(sorted(groups.items()), ours_steps):
            stats = vllm_stats.PrefixCacheStats()
            for x in lookups:
                stats.record(num_tokens=x.num_tokens, num_hits=x.num_hits,
                             preempted=x.preempted)
            got = (stats.requests, stats.queries, stats.hits, stats.preempted_requests,
                   stats.preempted_queries, stats.preempted_hits)
            assert got == tuple(mine), f"{name} step {step}: vLLM {got}, ours {tuple(mine)}"
            theirs.observe(stats)
            ours.observe(mine.requests, mine.queries, mine.hits)
            assert theirs.hit_rate == ours.hit_rate, (
                f"{name} window {window} step {step}: vLLM {theirs.hit_rate!r}, "
                f"ours {ours.hit_rate!r}")
            compared += 1
        if window == 1000:
            assert ours.hit_rate == rates.vllm_logged, f"{name}: engine_rates disagrees"
    pre = sum(x.preempted for x in rates.vllm_lookups)
    print(f"  {name}: {len(ours_steps):,} steps, {len(rates.vllm_lookups):,} lookups "
          f"({pre} preempted), logged {rates.vllm_logged:.4f}")
    return compared


def main() -> int:
    args = wheel_args(wheel_parser(__doc__, "vllm"), "vllm/v1/metrics/stats.py")
    vllm_stats = load_vllm_stats(args.root)
    total, failures = run_seeds(lambda *c: check(vllm_stats, *c), cases())
    print(f"{total:,} step comparisons, {failures} mismatching traces")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
