"""The Trace debugger's page, upload to summary on screen, CPU seconds (issue 27's < 15 s).

Each round runs, in a fresh subprocess per checkout (the order alternating round by round), the
page `pages/trace.py` under Streamlit's AppTest (in process, the page's own rendering
included): the upload of the conversation stand-in (examples/mooncake_conversation.py, 12,031
requests, 144.8 M prompt tokens) or of TRACE, the replay in the page's worker thread, the rerun
that draws the summary. CPU time of the whole process (threads included), not wall time: the
shared machine's load moves wall time by several times. Prints each checkout's median and the
median (lowest-highest) of the per-round ratios this / other, and whether the pages drew the
same thing (every element's proto; left out: the memory caption, which measures the process, and
the download buttons' random file ids).

    python benchmarks/trace_page.py [TRACE] [--base OTHER_ROOT] [--rounds 3]
        [--dump FILE] [--profile FILE]
(OTHER_ROOT: e.g. `git archive main | tar -x -C /tmp/main`; --profile: cProfile stats of one
run of this checkout, for `python -m pstats`.)
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.trace_apptest import run  # noqa: E402

CODE = r"""
import cProfile, json, time
trace, dump, prof = sys.argv[2], sys.argv[3], sys.argv[4]
data = open(trace, "rb").read()
profiles = []
if prof:  # every thread's own profile (the replay runs in a worker, the page in a runner)
    import threading
    _run = threading.Thread.run
    def run(self):
        p = cProfile.Profile()
        profiles.append(p)
        p.runcall(_run, self)
    threading.Thread.run = run
t0 = time.process_time()
upload(at, data)
cpu = time.process_time() - t0
if prof:
    import pstats
    for k, p in enumerate(profiles):
        p.create_stats()
    stats = pstats.Stats(*profiles)
    stats.dump_stats(prof)
lines = drawn(at)
if dump:
    open(dump, "w").write("\n".join(lines))
print(json.dumps({"cpu_s": cpu, "elements": len(lines), "sha": digest(lines),
                  "exception": [str(e.value) for e in at.exception]}))
"""


def one(root: Path, trace: Path, dump: str = "", prof: str = "") -> dict:
    return run(root, CODE, str(trace), dump, prof)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, help="default: the conversation stand-in")
    ap.add_argument("--base", type=Path, help="a checkout to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dump", help="write this checkout's drawn elements to FILE")
    ap.add_argument("--profile", help="write cProfile stats of one run to FILE (no timing)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace
        if trace is None:
            from examples.mooncake_conversation import generate, write
            trace = Path(tmp) / "conversation_standin.jsonl"
            write(trace, generate())
        trace = trace.resolve()
        print(f"trace {trace.name}: sha256 {hashlib.sha256(trace.read_bytes()).hexdigest()[:16]}")
        if args.profile:
            print(one(ROOT, trace, args.dump or "", str(Path(args.profile).resolve())))
            return
        roots = {"this": ROOT}
        if args.base:
            roots["other"] = args.base.resolve()
        runs: dict[str, list[dict]] = {name: [] for name in roots}
        for r in range(args.rounds):
            order = list(roots) if r % 2 == 0 else list(roots)[::-1]
            for name in order:
                dump = str(Path(args.dump).resolve()) if args.dump and name == "this" else ""
                runs[name].append(one(roots[name], trace, dump))
                print(name, runs[name][-1], flush=True)
        this = [x["cpu_s"] for x in runs["this"]]
        line = f"page to summary: this {statistics.median(this):.2f} CPU-s"
        if "other" in runs:
            other = [x["cpu_s"] for x in runs["other"]]
            ratios = [a / b for a, b in zip(this, other, strict=True)]
            same = {x["sha"] for x in runs["this"] + runs["other"]}
            line += (f"  other {statistics.median(other):.2f}  this/other "
                     f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
                     f"  same page drawn: {len(same) == 1}")
        print(line)


if __name__ == "__main__":
    main()
