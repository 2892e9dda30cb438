"""Time the Trace debugger's "Why this hit rate?" panel on the shipped traces.

For each trace: the replay the page runs first (scenarios/trace.py), then the panel's first
job (the watched simulator run: every prompt token in one bucket, scenarios/explain.py) and,
unless skipped, its second (the what-ifs: up to 14 more simulator runs), each with the
policy given; the figures and tables of viz/explain.py are built too. Time to the panel = the
explainer's first job (the replay is already on the page when the panel opens). Prints JSON,
then a table in seconds and MiB (peak RSS of the process so far).
Usage: python benchmarks/trace_explain.py [TRACE ...] [--policy fcfs] [--capacity 1000000]
       [--no-what-ifs-over 10000000]  (what-ifs only for traces up to that many prompt tokens)
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.budget import Budget  # noqa: E402
from scenarios.explain import run_explain, run_what_ifs  # noqa: E402
from scenarios.trace import replay  # noqa: E402
from viz.explain import bucket_figure, bucket_rows, capacity_figure  # noqa: E402

TRACES = ROOT / "examples" / "traces"
DEFAULT = [TRACES / "mooncake_excerpt.jsonl", TRACES / "customer_support.jsonl.gz",
           TRACES / "mooncake_synthetic_trace.jsonl.gz"]


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(path: Path, capacity: int, policy: str, what_if_limit: int) -> dict:
    budget = Budget(2**34, 2**35)
    t0 = time.perf_counter()
    r = replay(path.read_bytes(), path.name, capacity, session_id="b", budget=budget)
    t1 = time.perf_counter()
    x = run_explain(r.trace, r.digest, capacity, policy, session_id="b", budget=budget)
    bucket_figure(x.explanation), bucket_rows(x.explanation)
    t2 = time.perf_counter()
    row = {"trace": path.name, "requests": len(r.trace.requests),
           "prompt_tokens": x.explanation.prompt_tokens, "policy": policy,
           "capacity": capacity, "replay_s": round(t1 - t0, 2),
           "panel_s": round(t2 - t1, 2), "what_ifs_s": None,
           "tree_hit_rate": round(x.explanation.hit_rate("tree"), 4),
           "block_hit_rate": round(x.explanation.hit_rate("blocks"), 4)}
    if x.explanation.prompt_tokens <= what_if_limit:
        run_what_ifs(r.trace, x)
        capacity_figure(x.explanation.what_if["capacity"], x.explanation.working_set)
        row["what_ifs_s"] = round(time.perf_counter() - t2, 2)
    row["peak_rss_mib"] = round(rss_mib())
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--policy", default="fcfs", choices=("fcfs", "lpm"))
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--no-what-ifs-over", type=int, default=10_000_000)
    args = p.parse_args()
    rows = [one(t, args.capacity, args.policy, args.no_what_ifs_over) for t in args.traces]
    print(json.dumps(rows, indent=1))
    print(f"{'trace':36}{'requests':>9}{'replay s':>10}{'panel s':>9}{'what-ifs s':>11}"
          f"{'tree':>8}{'blocks':>8}{'RSS MiB':>9}")
    for r in rows:
        w = "-" if r["what_ifs_s"] is None else f"{r['what_ifs_s']:.1f}"
        print(f"{r['trace']:36}{r['requests']:>9,}{r['replay_s']:>10.1f}{r['panel_s']:>9.1f}"
              f"{w:>11}{r['tree_hit_rate']:>8.1%}{r['block_hit_rate']:>8.1%}"
              f"{r['peak_rss_mib']:>9,}")


if __name__ == "__main__":
    main()
