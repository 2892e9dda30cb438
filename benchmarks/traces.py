"""Production-trace figures: `compare` (unbounded and at 64k tokens), `configs`, `explain` and
the Trace debugger's replay of an upload on Mooncake-format traces, each in its own process:
wall seconds, CPU seconds (worker processes included), peak RSS; for the Trace debugger also
the CPU seconds to its summary and to every block keyframe apart (process time: on a loaded
machine wall seconds say more about the neighbours than about the code).

Traces: the seeded stand-in for Mooncake's conversation trace (examples/mooncake_conversation.py:
12,031 requests, 144.8 M prompt tokens; the real one is not shipped), Mooncake's public synthetic
trace (examples/traces/, 3,993 requests), or the paths given. Targets (issue 10): compare < 10 s
and < 1 GB RSS each; configs < 20 s; the upload summarised in < 15 s under 2 GB. Prints JSON,
then a table. Not part of the test run.
Usage: python benchmarks/traces.py [TRACE ...] [--skip configs,explain] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.mooncake_conversation import generate, write  # noqa: E402

SYNTHETIC = ROOT / "examples" / "traces" / "mooncake_synthetic_trace.jsonl.gz"
COMMANDS = {  # name -> (argv after `python -m radix`, with {trace}; figures to keep)
    "compare unbounded": (["compare", "{trace}", "--capacity", "1000000000", "--json"],
                          "compare"),
    "compare 64k": (["compare", "{trace}", "--capacity", "65536", "--json"], "compare"),
    "configs": (["configs", "{trace}", "--json"], "configs"),
    "explain": (["explain", "{trace}", "--no-what-if", "--json"], "explain"),
    # the Trace debugger's upload path: scenarios.trace.replay to the summary (the tree with
    # its event log and keyframes, the block cache's summary and keyframes), its default
    # capacity of 1,000,000 (summary_s); then, in checkouts before the block keyframes came
    # with the summary, those the block view built on demand (keyframes_s: all of them)
    "trace debugger": (["--replay", "{trace}"], "replay"),
}


# the child reports its CPU time (its worker processes' included) and peak RSS (its own or
# its largest worker's) on its last stderr line
CHILD = ("import json, resource, sys\n"
         "if sys.argv[1] == '--replay':\n"
         "    from pathlib import Path\n"
         "    from scenarios.trace import replay\n"
         "    import time\n"
         "    p = Path(sys.argv[2]); data = p.read_bytes(); t = time.perf_counter()\n"
         "    c = time.process_time()\n"
         "    r = replay(data, p.name); summary = time.perf_counter() - t\n"
         "    summary_cpu = time.process_time() - c; c = time.process_time()\n"
         "    t = time.perf_counter(); getattr(r.blocks, 'build', lambda: None)()\n"
         "    frames = time.perf_counter() - t\n"
         "    frames_cpu = time.process_time() - c\n"
         "    print(json.dumps({'stats': r.stats, 'steps': r.log.num_steps,\n"
         "                      'summary_s': summary, 'keyframes_s': frames,\n"
         "                      'summary_cpu_s': summary_cpu, 'keyframes_cpu_s': frames_cpu},\n"
         "                     default=str))\n"
         "    code = 0\n"
         "else:\n"
         "    from radix.cli import main\n"
         "    code = main(sys.argv[1:])\n"
         "me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, "
         "resource.RUSAGE_CHILDREN))\n"
         "cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime\n"
         "print(json.dumps({'cpu_s': cpu, 'rss_kb': max(me.ru_maxrss, kids.ru_maxrss)}), "
         "file=sys.stderr)\n"
         "sys.exit(code)\n")


def measure(argv: list[str], timeout: float) -> dict:
    """Runs `python -m radix ARGV` in a child: wall time, its CPU time and its peak RSS."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, *argv], cwd=ROOT, timeout=timeout,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"error": f"still running after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = proc.stderr.strip().splitlines()
    if proc.returncode or not lines:
        return {"wall_s": round(wall, 2), "error": lines[-1] if lines else "no output"}
    usage = json.loads(lines[-1])
    return {"wall_s": round(wall, 2), "cpu_s": round(usage["cpu_s"], 2),
            "peak_rss_mb": round(usage["rss_kb"] / 1024), "output": json.loads(proc.stdout)}


def figures(kind: str, out: dict) -> dict:
    if kind == "compare":
        return {f"{s}_hit_rate": out[s]["hit_rate"] for s in ("tree", "blocks")}
    if kind == "configs":
        return {f"{name}_hit_rate": round(t["hit_rate"], 4) for name, t in out.items()}
    if kind == "replay":  # the upload to its summary; then every block keyframe (on demand)
        return {"summary_s": round(out["summary_s"], 2),
                "summary_cpu_s": round(out["summary_cpu_s"], 2),
                "keyframes_s": round(out["keyframes_s"], 2),
                "keyframes_cpu_s": round(out["keyframes_cpu_s"], 2), "steps": out["steps"]}
    t = out["totals"]
    return {f"{s}_{b}": t[s][b] for s in t for b in ("hit", "evicted", "in_flight")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="Mooncake or request traces (default: see above)")
    ap.add_argument("--skip", default="", help="comma-separated commands to leave out")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    traces = [Path(p) for p in args.traces]
    with tempfile.TemporaryDirectory() as tmp:
        if not traces:
            conv = Path(tmp) / "conversation_standin.jsonl"
            write(conv, generate())
            traces = [conv, SYNTHETIC]
        results = []
        for trace in traces:
            for name, (argv, kind) in COMMANDS.items():
                if any(name.startswith(s) for s in skip):
                    continue
                row = measure([a.replace("{trace}", str(trace)) for a in argv], args.timeout)
                out = row.pop("output", None)
                if out is not None:
                    row.update(figures(kind, out))
                results.append({"trace": trace.name, "command": name, **row})
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(),
                      "results": results}, indent=1))
    print(f"\n{'trace':<34}{'command':<19}{'wall s':>8}{'cpu s':>8}{'peak MB':>9}  figures")
    for r in results:
        extra = r.get("error") or ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else
                                            f"{k}={v}" for k, v in r.items()
                                            if k not in ("trace", "command", "wall_s", "cpu_s",
                                                         "peak_rss_mb"))
        print(f"{r['trace']:<34}{r['command']:<19}{r.get('wall_s', 0):>8.2f}"
              f"{r.get('cpu_s', 0):>8.2f}{r.get('peak_rss_mb', 0):>9}  {extra}")


if __name__ == "__main__":
    main()
