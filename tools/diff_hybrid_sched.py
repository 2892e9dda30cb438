"""The scheduler over SGLang's component tree against the one-request lifecycle (not a test): the
oracle of tests/radix/sched/test_hybrid_scheduler.py over more seeds and every configuration.

One request at a time, radix/sched's Scheduler over a UnifiedRadixCache and radix/tree's
hybrid_lifecycle.serve (which tools/diff_sglang_hybrid.py holds to SGLang 0.5.23's own code) get
the same random workload: small pools (evictions, tombstones, cascades, path caps), shared
prefixes, later turns of earlier requests, LoRA namespaces, chunked prefill on and off, pages 1
and 4. After every request: its hit and outputs, the tree per component (slots, tombstones,
locks) and every slot freed, pool by pool, in order, must agree.

    python tools/diff_hybrid_sched.py --seeds 20
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.radix.sched.test_hybrid_scheduler import KINDS, _side_by_side  # noqa: E402

POLICIES = (("lru", "lpm"), ("lfu", "fcfs"), ("priority", "fcfs"), ("slru", "fcfs"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    failed = total = 0
    exercised: Counter = Counter()
    for kind, page in itertools.product(KINDS, (1, 4)):
        if kind == "nobuf" and page > 1:
            continue  # SGLang: no_buffer only at page 1
        runs = bad = hits = 0
        for seed, (policy, order), chunk in itertools.product(range(args.seeds), POLICIES,
                                                               (None, 16)):
            runs += 1
            try:
                seen, matched = _side_by_side(kind, page, seed, policy, order, chunk)
            except AssertionError as exc:
                bad += 1
                print(f"MISMATCH {exc}", flush=True)
                continue
            exercised += seen
            hits += matched
        failed += bad
        total += runs * 20
        print(f"{kind:6} page {page}: {runs} runs, {runs * 20:,} requests, {hits:,} tokens hit, "
              f"{bad} mismatching runs", flush=True)
    names = ("SlidingWindowFreed", "swa tombstoned", "swa recovered", "MambaStateCopied",
             "MambaStateTracked", "mamba tombstoned", "NodeEvicted")
    print(f"{total:,} requests, {failed} mismatching runs; exercised: "
          + ", ".join(f"{n} {exercised[n]:,}" for n in names))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
