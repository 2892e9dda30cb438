"""Does the server give a Trace debugger upload's memory back? RSS and wall time, two checkouts.

Each round starts `streamlit run app.py` of each checkout in turn (the order alternating round by
round; closed sessions expire after 2 s), warms it with one session that uploads TRACE on the
Trace debugger and scrubs to step 10 (so the page's code and caches are loaded), closes it and
measures the server's resident memory once it settles (baseline). Then SESSIONS browser
sessions, one after another, do the same, each timed from the upload to the summary drawn and
the page idle (wall seconds: the shared machine's load moves them; compare within a round). All
close; past the TTL one more visit sweeps them; RSS again (after). Prints JSON lines, then each
checkout's medians: baseline, after, after - baseline, seconds per upload.

    python benchmarks/trace_memory.py [TRACE] [--base OTHER_ROOT] [--sessions 3] [--rounds 2]
(default TRACE: examples/traces/mooncake_excerpt.jsonl; OTHER_ROOT e.g. `git archive main |
tar -x -C /tmp/main`.)
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import time
from pathlib import Path

from app_load import _settle as settle  # this folder: the script's own (sys.path[0])
from app_load import rss_mb
from app_load import start as start_app

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"

VISITS = 2  # visits after the sessions closed (--visits)


def start(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """app_load's server start on a free port (120 s to come up: a big checkout is slow)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return start_app(port, log, root, wait_s=120), f"http://127.0.0.1:{port}"


def _idle(pg, timeout_ms: int = 600_000) -> None:
    pg.wait_for_selector("h1", timeout=timeout_ms)
    pg.wait_for_selector(IDLE, timeout=timeout_ms)


def upload(browser, base: str, trace: Path) -> tuple[object, float]:
    """One session: upload, summary, scrub to step 10. Returns its context and the seconds from
    the upload to the summary drawn with the page idle."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.goto(f"{base}/trace")
    _idle(pg)
    t0 = time.monotonic()
    pg.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(trace))
    pg.get_by_text("Replay summary").wait_for(timeout=600_000)
    _idle(pg)
    seconds = time.monotonic() - t0
    box = pg.get_by_label("tree after step")
    box.fill("10")
    box.press("Enter")
    time.sleep(0.5)
    _idle(pg)
    return ctx, seconds


def one(browser, root: Path, trace: Path, sessions: int, log: Path) -> dict:
    proc, base = start(root, log)
    try:
        ctx, _ = upload(browser, base, trace)
        ctx.close()
        baseline = settle(browser, base, proc.pid)
        contexts, seconds = [], []
        for _ in range(sessions):
            ctx, s = upload(browser, base, trace)
            contexts.append(ctx)
            seconds.append(s)
        peak = rss_mb(proc.pid)
        for ctx in contexts:
            ctx.close()
        after = settle(browser, base, proc.pid, VISITS)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"baseline_mb": round(baseline, 1), "peak_mb": round(peak, 1),
            "after_mb": round(after, 1), "kept_mb": round(after - baseline, 1),
            "upload_s": [round(s, 2) for s in seconds]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path,
                    default=ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl")
    ap.add_argument("--base", type=Path, help="a checkout to compare with")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--visits", type=int, default=2, help="visits past the TTL before the "
                    "RSS after (each a page run that sweeps and collects)")
    args = ap.parse_args()
    global VISITS
    VISITS = args.visits
    from playwright.sync_api import sync_playwright

    roots = {"this": ROOT} | ({"other": args.base.resolve()} if args.base else {})
    runs: dict[str, list[dict]] = {name: [] for name in roots}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        for r in range(args.rounds):
            for name in (list(roots) if r % 2 == 0 else list(roots)[::-1]):
                out = one(browser, roots[name], args.trace.resolve(), args.sessions,
                          Path(f"/tmp/trace_memory_{name}.log"))
                runs[name].append(out)
                print(json.dumps({"checkout": name, "round": r, **out}), flush=True)
        browser.close()
    print(f"\n{'checkout':>9}{'baseline MiB':>14}{'after MiB':>11}{'kept MiB':>10}"
          f"{'upload s':>10}   ({args.sessions} sessions, {args.rounds} rounds, medians)")
    for name, outs in runs.items():
        med = {k: statistics.median(o[k] for o in outs)
               for k in ("baseline_mb", "after_mb", "kept_mb")}
        secs = statistics.median(s for o in outs for s in o["upload_s"])
        print(f"{name:>9}{med['baseline_mb']:>14,.0f}{med['after_mb']:>11,.0f}"
              f"{med['kept_mb']:>10,.1f}{secs:>10.2f}")


if __name__ == "__main__":
    main()
