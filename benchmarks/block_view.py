"""The Trace debugger on a long trace: from the upload to both views drawn (the summary with the
tree, and vLLM's block pool after the last request; issue 41's < 8 s), CPU seconds, two checkouts.

Each round runs, in a fresh subprocess per checkout (the order alternating round by round), the
page `pages/trace.py` under Streamlit's AppTest: the upload of TRACE (default: Mooncake's
public synthetic trace, examples/traces/mooncake_synthetic_trace.jsonl.gz, 3,993 requests) to
its first page drawn, then, where the page shows one (checkouts before the block keyframes came
with the summary, past 2,000 requests), the click on "show vLLM's block pool", timed apart: the
pool after the last request drawn. CPU time of the process and of its finished children (the
block replay may run in a worker process), not wall time: the shared machine's load moves wall
time by several times. Prints each checkout's medians and whether the pages drew the same thing
after one more (untimed) rerun (every element's proto; left out: the memory caption and the
download buttons' random file ids). `--jumps N`: then N slider jumps to random steps (seeded,
the same in every run), each rerun's CPU seconds (a jump's page: tree, block pool, charts,
and any collection it sets off), median and max per checkout.

    python benchmarks/block_view.py [TRACE] [--base OTHER_ROOT] [--rounds 3] [--jumps 0]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.trace_apptest import run  # noqa: E402

SAMPLE = ROOT / "examples" / "traces" / "mooncake_synthetic_trace.jsonl.gz"

CODE = r"""
import json, resource, time

def cpu():
    own = time.process_time()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + kids.ru_utime + kids.ru_stime

data = open(sys.argv[2], "rb").read()
t0 = cpu()
upload(at, data)
t1 = cpu()
if any(b.key == "trace.blocks_go" for b in at.button):
    at.button(key="trace.blocks_go").click().run()
t2 = cpu()
at.run()  # untimed: a plain rerun, so that a page that had a button clicked draws as one without
lines = drawn(at)
jumps = []  # slider jumps to random steps (seeded): CPU seconds of each rerun
if int(sys.argv[3]):
    import random
    rng, top = random.Random(0), int(at.slider(key="trace.slider").proto.max)
    for _ in range(int(sys.argv[3])):
        step = rng.randrange(top + 1)
        t = cpu()
        at.slider(key="trace.slider").set_value(step).run()
        jumps.append(cpu() - t)
print(json.dumps({"summary_cpu_s": t1 - t0, "blocks_cpu_s": t2 - t1, "both_cpu_s": t2 - t0,
                  "jumps_cpu_s": jumps,
                  "pool_drawn": any("Block cache after" in line for line in lines),
                  "sha": digest(lines), "exception": [str(e.value) for e in at.exception]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=SAMPLE)
    ap.add_argument("--base", type=Path, help="a checkout to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jumps", type=int, default=0, help="then this many slider jumps to "
                    "random steps (the same in every run), each rerun timed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace.resolve()
        if trace.suffix == ".gz":
            plain = Path(tmp) / trace.stem
            plain.write_bytes(gzip.decompress(trace.read_bytes()))
            trace = plain
        roots = {"this": ROOT} | ({"other": args.base.resolve()} if args.base else {})
        runs: dict[str, list[dict]] = {name: [] for name in roots}
        for r in range(args.rounds):
            for name in (list(roots) if r % 2 == 0 else list(roots)[::-1]):
                runs[name].append(run(roots[name], CODE, str(trace), str(args.jumps)))
                print(name, runs[name][-1], flush=True)
    for name, outs in runs.items():
        med = {k: statistics.median(o[k] for o in outs)
               for k in ("summary_cpu_s", "blocks_cpu_s", "both_cpu_s")}
        print(f"{name}: upload to the first page {med['summary_cpu_s']:.2f} CPU-s, the click to "
              f"the pool {med['blocks_cpu_s']:.2f} CPU-s, both views {med['both_cpu_s']:.2f} "
              f"CPU-s (medians of {len(outs)}), pool drawn: {all(o['pool_drawn'] for o in outs)}")
        jumps = [j for o in outs for j in o.get("jumps_cpu_s", [])]
        if jumps:
            print(f"{name}: slider jumps (the page's rerun) median {statistics.median(jumps):.2f} "
                  f"CPU-s, max {max(jumps):.2f}, over 1 s: {sum(j > 1 for j in jumps)} of "
                  f"{len(jumps)}")
    print("same page drawn:", len({o["sha"] for outs in runs.values() for o in outs}) == 1)


if __name__ == "__main__":
    main()
