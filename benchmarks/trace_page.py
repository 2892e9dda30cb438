"""The Trace debugger's page, upload to summary on screen, CPU seconds (issue 27's < 15 s).

Each round runs, in a fresh subprocess per checkout (the order alternating round by round), the
page `app_pages/trace.py` under Streamlit's AppTest (in process, the page's own rendering
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
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = r"""
import cProfile, hashlib, json, re, sys, time
sys.path.insert(0, ".")
from streamlit.testing.v1 import AppTest
trace, dump, prof = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(trace, "rb").read()
at = AppTest.from_file("app_pages/trace.py", default_timeout=3600)
at.run()
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
at.file_uploader(key="trace.upload").set_value(("trace.jsonl", data, "text/plain")).run()
from app_pages._serve import holdings
state = holdings().get(at.session_state["trace.sid"], "trace")
if state.get("job") is not None:
    assert state["job"].wait(3600)
at.run()
cpu = time.process_time() - t0
if prof:
    import pstats
    for k, p in enumerate(profiles):
        p.create_stats()
    stats = pstats.Stats(*profiles)
    stats.dump_stats(prof)
lines = []
def walk(node):
    proto = getattr(node, "proto", None)
    if proto is not None:
        text = str(proto)
        if "Memory (estimated)" not in text:
            lines.append(type(node).__name__ + " " + text)
    for child in getattr(node, "children", {}).values():
        walk(child)
walk(at._tree)
out = re.sub(r'deferred_file_id: "[0-9a-f]+"', 'deferred_file_id: "-"', "\n".join(lines))
if dump:
    open(dump, "w").write(out)
print(json.dumps({"cpu_s": cpu, "elements": len(lines),
                  "sha": hashlib.sha256(out.encode()).hexdigest()[:16],
                  "exception": [str(e.value) for e in at.exception]}))
"""


def one(root: Path, trace: Path, dump: str = "", prof: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", CODE, str(trace), dump, prof], cwd=root,
                          check=True, capture_output=True, text=True)
    import json
    return json.loads(done.stdout.strip().splitlines()[-1])


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
            sys.path.insert(0, str(ROOT))
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
