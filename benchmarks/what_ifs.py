"""Time explain's what-ifs (radix.runs.explain.what_ifs) on a trace, per simulator run.

Each round runs the what-ifs once in a fresh process for every code tree given (this checkout,
and `--base DIR`, an older checkout such as `git archive main | tar -x -C DIR`), the trees
interleaved round by round, so a slow spell of a shared machine hits both alike. With --jobs 1
the runs go one after another in the process and each run's CPU seconds are read off the
progress calls; with --jobs N they fan out over N forked workers (the CLI's default) and only
the total is kept (CPU seconds of the process and its workers, and wall seconds). The working
set (the capacity curve's top) is the explainer's, measured once in this tree.
Prints JSON lines, then medians per run and in total, and the ratio base / this.
Usage: python benchmarks/what_ifs.py [TRACE] [--base DIR] [--rounds 3] [--jobs 1]
       [--policy lpm]  (TRACE: default the seeded conversation stand-in, 12,031 requests)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# argv: trace, policy, working set (0: measure it and print it), jobs
CHILD = r"""
import json, resource, sys, time
from radix.runs.explain import explain, what_ifs
from radix.runs.sim import SimConfig
from radix.traces import load_trace

trace, cfg = load_trace(sys.argv[1]), SimConfig(policy=sys.argv[2])
ws, jobs = int(sys.argv[3]), int(sys.argv[4])
if not ws:
    print(json.dumps({"working_set": explain(trace, cfg, what_if=False).working_set}))
    sys.exit()
runs, cur = {}, [None, time.process_time()]

def progress(fraction, text):
    if not text.startswith("what-if ") or " of " not in text or jobs > 1:
        return
    label = text[text.index("(") + 1:text.index(")")] if "(" in text else text
    if label != cur[0]:
        now = time.process_time()
        if cur[0] is not None:
            runs[cur[0]] = runs.get(cur[0], 0.0) + now - cur[1]
        cur[:] = [label, now]

wall, cpu = time.perf_counter(), time.process_time()
out = what_ifs(trace, cfg, ws, progress=progress, jobs=jobs)
now = time.process_time()
if cur[0] is not None:
    runs[cur[0]] = runs.get(cur[0], 0.0) + now - cur[1]
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"runs": runs, "cpu_s": now - cpu + kids.ru_utime + kids.ru_stime,
                  "wall_s": time.perf_counter() - wall,
                  "tree_hit_rates": [round(p["tree_hit_rate"], 6) for p in out["capacity"]]}))
"""


def child(tree: Path, args: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=tree, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def standin(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from examples.mooncake_conversation import generate, write
    path = folder / "conversation_standin.jsonl"
    write(path, generate())
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--base", type=Path, help="an older checkout to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--policy", default="lpm", help="the explainer's (the CLI's default: lpm)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = (a.trace or standin(Path(tmp))).resolve()
        ws = child(ROOT, [str(trace), a.policy, "0", "1"])["working_set"]
        trees = {"this": ROOT} | ({"base": a.base.resolve()} if a.base else {})
        rows: dict[str, list[dict]] = {name: [] for name in trees}
        for k in range(a.rounds):
            for name, tree in (trees.items() if k % 2 == 0 else reversed(trees.items())):
                row = child(tree, [str(trace), a.policy, str(ws), str(a.jobs)])
                rows[name].append(row)
                print(json.dumps({"round": k, "tree": name, "working_set": ws} | row),
                      flush=True)
    report(rows, a.jobs)


def report(rows: dict[str, list[dict]], jobs: int) -> None:
    med = {name: {"cpu_s": statistics.median(r["cpu_s"] for r in rs),
                  "wall_s": statistics.median(r["wall_s"] for r in rs),
                  "runs": {lab: statistics.median(r["runs"].get(lab, 0.0) for r in rs)
                           for lab in rs[0]["runs"]}} for name, rs in rows.items()}
    names = list(med)
    print(f"\nmedians of {len(rows[names[0]])} rounds, {jobs} job(s), CPU seconds")
    if jobs == 1:
        for lab in med[names[0]]["runs"]:
            print(f"{lab:>40}" + "".join(f"{med[n]['runs'].get(lab, 0.0):>10.1f}" for n in names))
    print(f"{'total CPU s':>40}" + "".join(f"{med[n]['cpu_s']:>10.1f}" for n in names))
    print(f"{'total wall s':>40}" + "".join(f"{med[n]['wall_s']:>10.1f}" for n in names))
    print(f"{'':>40}" + "".join(f"{n:>10}" for n in names))
    if "base" in med:
        print(f"base / this, CPU: {med['base']['cpu_s'] / med['this']['cpu_s']:.2f}x")
        same = all(r["tree_hit_rates"] == rows["base"][0]["tree_hit_rates"]
                   for rs in rows.values() for r in rs)
        print(f"capacity curve hit rates identical in every run: {same}")


if __name__ == "__main__":
    main()
