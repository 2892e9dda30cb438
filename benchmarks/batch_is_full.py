"""Time `python -m radix simulate` at a small capacity in two checkouts (batch_is_full, #27).

Each round runs the CLI once per code tree (this checkout and `--base DIR`, an older checkout such
as `git archive main | tar -x -C DIR`), in a fresh process, the order alternating round by round,
and reads the child's CPU seconds (a shared machine's load moves wall time by several times).
The trace: the first `--requests` of the seeded conversation stand-in (examples/
mooncake_conversation.py), or TRACE. Prints each run, the medians, the per-round ratios base /
this, and every `totals` figure that differs between the trees (with the reason to look for: the
scheduler stops trying admission while SGLang's batch_is_full is set).

    python benchmarks/batch_is_full.py [TRACE] --base DIR [--capacity 100000] [--policy lpm]
        [--rounds 3] [--requests 3000]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def standin(folder: Path, requests: int) -> Path:
    """The first `requests` lines of the seeded conversation stand-in, written under folder."""
    sys.path.insert(0, str(ROOT))
    from examples.mooncake_conversation import generate, write
    path = folder / f"conversation_standin_{requests}.jsonl"
    write(path, generate()[:requests])
    return path


def run_cli(tree: Path, trace: Path, capacity: int, policy: str) -> tuple[float, dict]:
    """(CPU seconds of the child, its --json output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "radix", "simulate", str(trace), "--json",
                           "--policy", policy, "--capacity", str(capacity)],
                          cwd=tree, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--base", type=Path, required=True, help="an older checkout")
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--policy", default="lpm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=3000)
    a = ap.parse_args()
    trees = {"this": ROOT, "base": a.base.resolve()}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = (a.trace or standin(Path(tmp), a.requests)).resolve()
        for k in range(a.rounds):
            for name, tree in (trees.items() if k % 2 == 0 else reversed(trees.items())):
                seconds, result = run_cli(tree, trace, a.capacity, a.policy)
                cpu[name].append(seconds)
                out.setdefault(name, result)
                print(json.dumps({"round": k, "tree": name, "cpu_s": round(seconds, 2)}),
                      flush=True)
    ratios = [b / t for b, t in zip(cpu["base"], cpu["this"])]
    print(f"\n{a.policy}, capacity {a.capacity:,}, {a.rounds} rounds, CPU seconds (median): "
          f"this {statistics.median(cpu['this']):.2f}, base {statistics.median(cpu['base']):.2f}"
          f"; base / this {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    this, base = out["this"]["totals"], out["base"]["totals"]
    changed = [k for k in this if this.get(k) != base.get(k)]
    print("totals that differ (base -> this):" if changed else "totals identical")
    for k in changed:
        print(f"  {k}: {base.get(k)} -> {this[k]}")


if __name__ == "__main__":
    main()
