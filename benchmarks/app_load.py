"""Load the app as a classroom would: N browser sessions, R rounds each; does memory come back?

Starts `streamlit run app.py` (disconnected sessions expire after 1 s), warms it up with one
session that visits every page (the model loads once per process), closes it and measures the
server's resident memory (baseline). Then N sessions (Chromium contexts) run R rounds each: a
trace upload and a scrub on the Trace debugger (each session its own trace, so no upload cache
is shared), three Tour steps, one Eviction lab page, and a 2-token prompt on the Live page (its own
engine and KV pool per session). All sessions close; one more visit lets the server sweep them
(engines closed, budgets released). Prints JSON, then a table: baseline, peak, after, and the
ratio after / baseline (the CI test wants <= 1.10).
`--downloads`: every session (the warm-up too) also writes and fetches every Trace debugger
download (the RSS is then sampled every half second; the files, name and bytes, are listed).
Usage: python benchmarks/app_load.py [--sessions 5] [--rounds 3] [--requests 120] [--trace F]
       [--downloads] [--no-live] [--light]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from runtime.budget import PROCESS_MB  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"
TTL_S = 1  # seconds a closed session is kept (each settle waits 3 x (TTL_S + 1): 6 s, was 9)
DOWNLOADED: list[list[tuple[str, int]]] = []  # every_download's files, per session and round


def engine_threads(pid: int) -> int:
    """Live engine threads still running in the server (each holds a session's KV pool)."""
    count = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            count += (task / "comm").read_text().startswith("radixlens-engi")
        except OSError:
            pass
    return count


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def start(port: int, log: Path, root: Path = ROOT, wait_s: float = 60) -> subprocess.Popen:
    """`streamlit run app.py` of the checkout at `root` on `port` (sessions expire TTL_S after
    their browser left), once it accepts connections (RuntimeError with its log's tail if it
    exits, or is not up in `wait_s`). benchmarks/trace_memory.py starts its servers here too.
    Started as the README starts the app: `MALLOC_ARENA_MAX=2` unless the environment says
    otherwise (glibc's per-thread heaps otherwise keep freed memory: docs/PERF.md)."""
    env = {**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false", "--server.disconnectedSessionTTL", str(TTL_S)],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))  # noqa: SIM115
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(log.read_text()[-2000:]) from None
            time.sleep(0.2)
    raise RuntimeError("the server did not start")


def trace_file(folder: Path, session: int, num_requests: int) -> Path:
    """A request trace of its own per session: shared 200-token prefixes, 60-token tails."""
    lines = []
    for i in range(num_requests):
        prefix = [session * 1_000_000 + (i % 7) * 1_000 + k for k in range(200)]
        tail = [session * 1_000_000 + 500_000 + i * 100 + k for k in range(60)]
        lines.append(json.dumps({"rid": f"s{session}-r{i}", "arrival": i * 0.1,
                                 "tokens": prefix + tail, "output_len": 4}))
    path = folder / f"session{session}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _idle(pg, timeout_ms: int = 180_000) -> None:
    pg.wait_for_selector("h1", timeout=timeout_ms)
    pg.wait_for_selector(IDLE, timeout=timeout_ms)


def every_download(pg, folder: Path, timeout_ms: int = 600_000) -> list[tuple[str, int]]:
    """On the Trace debugger, at its last step (the biggest tree): writes every file its buttons
    offer (pages/_downloads.py; the small ones are links already) and the slides export, then
    downloads every link to `folder`; (file name, bytes) of each. The server writes them to
    disk and serves them from there."""
    pg.locator(".st-key-trace-slider input[type=range]").press("End")  # the biggest tree
    _idle(pg, timeout_ms)
    pg.get_by_text("export steps for slides").click()
    _idle(pg, timeout_ms)
    pg.get_by_role("button", name="animated HTML of frames").click()
    _idle(pg, timeout_ms)
    buttons = "[class*=st-key-downloads-] button"
    for _ in range(20):  # each click reruns the page: find the next button afresh
        left = pg.locator(buttons)
        if not left.count():
            break
        before = pg.locator("a.rl-download").count()
        left.first.click()
        pg.wait_for_function(f"(n) => document.querySelectorAll('a.rl-download').length > n "
                             f"|| !document.querySelector('{buttons}')", arg=before,
                             timeout=timeout_ms)
        _idle(pg, timeout_ms)
    # a worker's file: its progress bar goes when its link comes
    pg.wait_for_function("() => !document.querySelector('[data-testid=stProgress]')",
                         timeout=timeout_ms)
    _idle(pg, timeout_ms)
    got = []
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(pg.locator("a.rl-download").count()):
        with pg.expect_download(timeout=timeout_ms) as info:
            pg.locator("a.rl-download").nth(i).click()
        path = folder / info.value.suggested_filename
        info.value.save_as(path)
        got.append((path.name, path.stat().st_size))
        path.unlink()
    return got


def one_round(pages: list, base: str, traces: list[Path], live: bool, light: bool = False,
              downloads: Path | None = None) -> None:
    """Trace upload and a scrub; Tour steps; the Eviction lab; a Live prompt, on every page
    side by side: each action is sent to all the sessions before any is awaited, so the server
    serves them together. `light`: one Tour step and no Eviction lab (the CI test's rounds).
    `downloads`: after the scrub every session writes and fetches every download there, into
    that folder (`every_download`), one session after another."""
    def goto(path: str) -> None:
        for pg in pages:
            _idle(pg)
            pg.goto(f"{base}/{path}", wait_until="commit")

    for pg in pages:
        pg.goto(f"{base}/trace", wait_until="commit")
    for pg, trace in zip(pages, traces, strict=True):
        _idle(pg)
        pg.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(trace))
    for pg in pages:
        pg.get_by_text("Replay summary").wait_for(timeout=180_000)
        _idle(pg)
        box = pg.get_by_label("tree after step")
        box.fill("10")
        box.press("Enter")
    if downloads is not None:
        for k, pg in enumerate(pages):
            _idle(pg)
            DOWNLOADED.append(every_download(pg, downloads / f"session{k}"))
    goto("tour")
    for _ in range(1 if light else 3):
        for pg in pages:
            _idle(pg)
            pg.get_by_role("button", name="next ▶").click()
    if not light:
        goto("eviction")
    if live:
        goto("live")
        for pg in pages:
            _idle(pg)
            pg.get_by_role("tab", name="your prompt").click()
            pg.get_by_label("max new tokens").fill("2")
            pg.get_by_role("button", name="run", exact=True).click()
        for pg in pages:
            pg.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=stMetricValue]')]"
                ".some(e => /^[1-9]/.test(e.innerText.trim()))", timeout=180_000)
    for pg in pages:
        _idle(pg)


def run(sessions: int = 5, rounds: int = 3, num_requests: int = 120, live: bool = True,
        workdir: Path | None = None, light: bool = False, trace: Path | None = None,
        browser=None, downloads: bool = False) -> dict:
    """browser: a running Playwright Chromium to use (a test session's: one process can hold
    only one sync Playwright); by default one of its own, launched and closed here.
    `downloads`: every session also writes and fetches every download of the Trace debugger;
    the server's memory is then sampled every half second (the peak of a download is brief)."""
    from playwright.sync_api import sync_playwright

    if browser is None:
        with sync_playwright() as pw:
            own = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
            try:
                return run(sessions, rounds, num_requests, live, workdir, light, trace, own,
                           downloads)
            finally:
                own.close()
    workdir = workdir or Path("/tmp/radixlens-app-load")
    workdir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = start(port, workdir / "server.txt")
    samples: list[float] = []
    try:
        warm = browser.new_context(viewport={"width": 1280, "height": 800})
        warm_trace = trace or trace_file(workdir, 99, num_requests)
        got = workdir / "downloads" if downloads else None
        # the warm-up does what the sessions will (the downloads too: their first use imports
        # and caches what every later one shares, as the model's load does for Live)
        one_round([warm.new_page()], base, [warm_trace], live, light, got)
        warm.close()
        baseline = _settle(browser, base, proc.pid)
        started = time.monotonic()
        stop = threading.Event()
        threading.Thread(target=_sample, args=(proc.pid, samples, stop), daemon=True).start()
        DOWNLOADED.clear()
        contexts = [browser.new_context(viewport={"width": 1280, "height": 800})
                    for _ in range(sessions)]
        pages = [c.new_page() for c in contexts]
        traces = [trace or trace_file(workdir, i, num_requests) for i in range(sessions)]
        for k in range(rounds):
            if light:  # the CI test's two minutes: the sessions side by side; a session's
                # engine is made by its first Live prompt and reused, so only round one asks
                one_round(pages, base, traces, live and not k, light, got)
                samples.append(rss_mb(proc.pid))
                continue
            for pg, tr in zip(pages, traces):  # the full benchmark: one after another
                one_round([pg], base, [tr], live, downloads=got)
                samples.append(rss_mb(proc.pid))
        load_s = time.monotonic() - started
        stop.set()
        for c in contexts:
            c.close()
        after = _settle(browser, base, proc.pid)
        engines = engine_threads(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"sessions": sessions, "rounds": rounds, "requests_per_trace": num_requests,
            "live": live, "light": light, "trace": str(trace or "generated"),
            "budget_mb": PROCESS_MB,  # the server's own (runtime/budget.py, RADIXLENS_PROCESS_MB)
            "baseline_mb": round(baseline, 1),
            "peak_mb": round(max(samples), 1),
            "after_mb": round(after, 1), "after_over_baseline": round(after / baseline, 3),
            "engines_left": engines,
            "load_seconds": round(load_s, 1),
            "downloads": [dict(files) for files in DOWNLOADED]}


def _sample(pid: int, samples: list[float], stop: threading.Event) -> None:
    """The server's RSS every half second until `stop`."""
    while not stop.wait(0.5):
        try:
            samples.append(rss_mb(pid))
        except (OSError, RuntimeError):
            return


def _settle(browser, base: str, pid: int, visits: int = 2) -> float:
    """Waits past the session TTL, then visits `visits` times (the first expires the closed
    sessions; its page run sweeps them), and returns the server's RSS once it stops falling.
    benchmarks/trace_memory.py settles through this too."""
    time.sleep(TTL_S + 1)
    for _ in range(visits):
        ctx = browser.new_context()
        pg = ctx.new_page()
        pg.goto(f"{base}/scheduler")
        _idle(pg)
        ctx.close()
        time.sleep(TTL_S + 1)
    last = rss_mb(pid)
    for _ in range(10):
        time.sleep(0.5)
        now = rss_mb(pid)
        if abs(now - last) < 1:
            return now
        last = now
    return last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=120, help="requests in each session's trace")
    ap.add_argument("--no-live", action="store_true", help="skip the Live page (no model)")
    ap.add_argument("--light", action="store_true", help="the CI test's short rounds")
    ap.add_argument("--trace", type=Path, help="upload this file in every session (e.g. "
                    "examples/traces/mooncake_excerpt.jsonl) instead of a small generated one")
    ap.add_argument("--downloads", action="store_true",
                    help="every session writes and fetches every Trace debugger download")
    args = ap.parse_args()
    out = run(args.sessions, args.rounds, args.requests, live=not args.no_live, light=args.light,
              trace=args.trace and args.trace.resolve(), downloads=args.downloads)
    print(json.dumps(out, indent=1))
    print(f"\n{'sessions':>8}{'rounds':>8}{'baseline MiB':>14}{'peak MiB':>10}{'after MiB':>11}"
          f"{'after/base':>12}{'load s':>8}")
    print(f"{out['sessions']:>8}{out['rounds']:>8}{out['baseline_mb']:>14,.0f}"
          f"{out['peak_mb']:>10,.0f}{out['after_mb']:>11,.0f}{out['after_over_baseline']:>12.3f}"
          f"{out['load_seconds']:>8.0f}")


if __name__ == "__main__":
    main()
