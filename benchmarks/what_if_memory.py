"""The app's what-ifs: the server's memory before and after, and their wall time.

For each checkout (this one, and `--base DIR`, an older one such as `git archive main | tar -x
-C DIR`) in turn: starts `streamlit run app.py` (closed sessions expire after 2 s), visits the
Trace debugger once and measures the server's resident memory once it settles (baseline). Then
one browser session uploads TRACE, opens "Why this hit rate?", waits for the explainer, starts
the what-ifs (their button, when the page offers one instead of starting them) and waits for
their charts ("What if:"). Meanwhile the server's RSS and its worker children's (summed) are
sampled every 0.25 s (peaks). The session closes; past the TTL two visits sweep it and the RSS
is read again once it stops falling (after). Prints a JSON line per checkout: baseline, peak,
after (MiB), the workers' peak, the what-ifs' wall seconds (from their start to their charts
drawn), the server's own CPU seconds over them and its children's, and the machine's load.

    python benchmarks/what_if_memory.py [TRACE] [--base OTHER_ROOT]
(default TRACE: examples/traces/mooncake_synthetic_trace.jsonl.gz.)
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

from app_load import _settle as settle  # this folder: the script's own (sys.path[0])
from app_load import rss_mb
from trace_memory import CHROMIUM, _idle, cpu_s, start, visited_once

ROOT = Path(__file__).resolve().parents[1]


def children_mb(pid: int) -> float:
    """Resident memory of the process's children (its what-if workers), MiB summed."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                total += rss_mb(int(kid))
            except (OSError, RuntimeError):
                pass
    return total


class Sampler(threading.Thread):
    """The server's RSS and its children's, every 0.25 s: the peaks."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.stop = pid, threading.Event()
        self.peak = self.kids = 0.0

    def run(self) -> None:
        while not self.stop.wait(0.25):
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
                self.kids = max(self.kids, children_mb(self.pid))
            except (OSError, RuntimeError):
                return


def what_ifs(browser, base: str, trace: Path, pid: int, timeout_ms: int) -> dict:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.goto(f"{base}/trace")
    _idle(pg)
    pg.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(trace))
    pg.get_by_text("Replay summary").wait_for(timeout=timeout_ms)
    _idle(pg, timeout_ms)
    pg.get_by_text("Why this hit rate?").click()
    pg.get_by_text("Hit rate:").wait_for(timeout=timeout_ms)
    ask = pg.get_by_role("button", name="run the what-ifs")
    t0, c0 = time.monotonic(), cpu_s(pid)
    if ask.count():
        label = ask.inner_text()
        ask.click()
    else:
        label = None  # started by themselves (t0 is late by the page's redraw)
    pg.get_by_text("What if:").wait_for(timeout=timeout_ms)
    seconds, c1 = time.monotonic() - t0, cpu_s(pid)
    said = pg.get_by_text("What if:").first.inner_text()
    _idle(pg, timeout_ms)
    ctx.close()
    return {"what_ifs_s": round(seconds, 1), "server_cpu_s": round(c1[0] - c0[0], 1),
            "children_cpu_s": round(c1[1] - c0[1], 1), "button": label, "said": said}


def one(browser, root: Path, trace: Path, log: Path, timeout_ms: int) -> dict:
    proc, base = start(root, log)
    try:
        baseline = visited_once(browser, base, proc.pid)
        sampler = Sampler(proc.pid)
        sampler.start()
        out = what_ifs(browser, base, trace, proc.pid, timeout_ms)
        sampler.stop.set()
        sampler.join()
        after = settle(browser, base, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"baseline_mb": round(baseline, 1), "peak_mb": round(sampler.peak, 1),
            "after_mb": round(after, 1), "kept_mb": round(after - baseline, 1),
            "workers_peak_mb": round(sampler.kids, 1), **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path,
                    default=ROOT / "examples" / "traces" / "mooncake_synthetic_trace.jsonl.gz")
    ap.add_argument("--base", type=Path, help="a checkout to compare with")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a step may take")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    roots = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        for name, root in roots.items():
            out = one(browser, root, args.trace.resolve(), Path(f"/tmp/what_if_memory_{name}"
                                                                ".log"), int(args.timeout * 1e3))
            print(json.dumps({"checkout": name, "trace": args.trace.name,
                              "load": os.getloadavg()[0], **out}), flush=True)
        browser.close()


if __name__ == "__main__":
    main()
