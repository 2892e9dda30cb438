"""Does the server give a Trace debugger upload's memory back? RSS and wall time, two checkouts.

Each round starts `streamlit run app.py` of each checkout in turn (the order alternating round by
round; closed sessions expire after 2 s), warms it with one session that uploads TRACE on the
Trace debugger and scrubs to step 10 (so the page's code and caches are loaded), closes it and
measures the server's resident memory once it settles (baseline). Then SESSIONS browser
sessions, one after another, do the same, each timed from the upload to the summary drawn and
the page idle (wall seconds: the shared machine's load moves them; compare within a round). All
close; past the TTL one more visit sweeps them; RSS again (after). Prints JSON lines, then each
checkout's medians: baseline, after, after - baseline, seconds per upload.
`--why`: each session also opens "Why this hit rate?" and waits for the explainer (and the
what-ifs when they start by themselves). `--each` (issue 27: a leak, or a one-time cost?): no
warm-up upload; the baseline is after one visit, and each session is closed and swept before
the next, RSS after each (after_each_mb), glibc's per-thread heaps after each (heaps) and the
server's own CPU seconds in each session, page opened to last chart (server_cpu_s).
`--snapshots DIR` (with --each): the servers run with benchmarks/memsnap/ on PYTHONPATH
(tracemalloc, RADIXLENS_MEMSNAP_FRAMES frames, 0 for none), each RSS reading is followed by a
snapshot (DIR/<checkout>-<round>/snap-K.*: K = 0 the baseline, k after session k) and the top
15 differences by line are printed (snap-2 - snap-1 and the last - snap-2: what sessions after
the first keep), with the modules and pymalloc's arenas.

    python benchmarks/trace_memory.py [TRACE] [--base OTHER_ROOT] [--sessions 3] [--rounds 2]
        [--why] [--each] [--snapshots DIR]
(default TRACE: examples/traces/mooncake_excerpt.jsonl; OTHER_ROOT e.g. `git archive main |
tar -x -C /tmp/main`.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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
WHY = False  # each session opens the Why panel too (--why)
WHAT_IFS: list[str] = []  # with --why, per session: the what-ifs "ran" by themselves or "offered"


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
    if WHY:  # the explainer; then the what-ifs' charts, or their button when they wait for it
        pg.get_by_text("Why this hit rate?").click()
        pg.get_by_text("Hit rate:").wait_for(timeout=600_000)
        pg.get_by_text("What if:").or_(pg.get_by_role("button", name="run the what-ifs")
                                       ).first.wait_for(timeout=600_000)
        _idle(pg)
        WHAT_IFS.append("ran" if pg.get_by_text("What if:").count() else "offered")
    return ctx, seconds


def cpu_s(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, its waited-for children's), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    tick = os.sysconf("SC_CLK_TCK")
    return (utime + stime) / tick, (cutime + cstime) / tick


def glibc_heaps(pid: int) -> int:
    """glibc's per-thread heaps in a process: anonymous mappings that start on a 64 MiB boundary
    and span 64 MiB with the reserved rest after them (heap.c's HEAP_MAX_SIZE on 64-bit)."""
    spans = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        addr, perms, _, _, inode, *path = line.split()
        lo, hi = (int(x, 16) for x in addr.split("-"))
        spans.append((lo, hi, perms, inode == "0" and not path))
    count, heap = 0, 64 * 2**20
    for k, (lo, hi, perms, anon) in enumerate(spans):
        if not (anon and perms == "rw-p" and lo % heap == 0):
            continue
        end = hi
        for lo2, hi2, perms2, anon2 in spans[k + 1:]:
            if lo2 != end or not anon2 or perms2 != "---p" or end - lo >= heap:
                break
            end = hi2
        count += end - lo == heap
    return count


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


def snapshot(pid: int, folder: Path | None) -> None:
    """Has the server (run with benchmarks/memsnap/ on PYTHONPATH) write its next snapshot to
    `folder`, and waits until it is whole."""
    if folder is None:
        return
    k = len(list(folder.glob("snap-*.done")))
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 600
    while not (folder / f"snap-{k}.done").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no snapshot {k} from the server")
        time.sleep(0.5)


def visited_once(browser, base: str, pid: int, visits: int = 2) -> float:
    """The server's RSS (baseline) after one visit to the Trace debugger, settled (`settle`:
    past the session TTL, `visits` visits sweep the closed session)."""
    ctx = browser.new_context()
    ctx.new_page().goto(f"{base}/trace")
    _idle(ctx.pages[0])
    ctx.close()
    return settle(browser, base, pid, visits)


def one_each(browser, root: Path, trace: Path, sessions: int, log: Path,
             snaps: Path | None) -> dict:
    """--each: one visit, RSS (baseline); then each session uploads, closes and is swept before
    the next, RSS after each (and a snapshot after each reading, with `snaps`)."""
    proc, base = start(root, log)
    try:
        baseline = visited_once(browser, base, proc.pid, VISITS)
        snapshot(proc.pid, snaps)
        after, seconds, peaks, cpu, heaps = [], [], [], [], [glibc_heaps(proc.pid)]
        for _ in range(sessions):
            c0 = cpu_s(proc.pid)[0]
            ctx, s = upload(browser, base, trace)
            cpu.append(cpu_s(proc.pid)[0] - c0)
            seconds.append(s)
            peaks.append(rss_mb(proc.pid))
            ctx.close()
            after.append(settle(browser, base, proc.pid, VISITS))
            heaps.append(glibc_heaps(proc.pid))
            snapshot(proc.pid, snaps)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"baseline_mb": round(baseline, 1), "peak_mb": round(max(peaks), 1),
            "after_mb": round(after[-1], 1), "kept_mb": round(after[-1] - baseline, 1),
            "after_each_mb": [round(a, 1) for a in after],
            "upload_s": [round(s, 2) for s in seconds],
            "server_cpu_s": [round(c, 1) for c in cpu], "heaps": heaps,
            "what_ifs": WHAT_IFS[-sessions:],
            "load": os.getloadavg()[0]}


def diffs(folder: Path, top: int = 15) -> None:
    """Prints the snapshots' modules, arenas and RSS, and the top differences by line."""
    import tracemalloc

    stats = [json.loads(p.read_text()) for p in sorted(folder.glob("snap-*.json"),
                                                       key=lambda p: int(p.stem[5:]))]
    for k, st in enumerate(stats):
        new = sorted(set(st["module_names"]) - set(stats[k - 1]["module_names"])) if k else []
        print(f"snap-{k}: rss {st['rss_mb']} MiB, traced {st['traced_mb']} MiB, modules "
              f"{st['modules']} (+{len(new)}: {' '.join(new[:12])}{' ...' if new[12:] else ''}),"
              f" arenas {st.get('arenas_allocated_current')}, allocated blocks "
              f"{st.get('bytes_in_allocated_blocks', 0) / 2**20:.1f} MiB, gc objects "
              f"{st['gc_objects']}")
        anon = st.get("anon_maps_kb", [])
        print(f"  threads {st.get('threads')}, glibc {st.get('glibc_mb')}, arrow "
              f"{st.get('arrow')}, anonymous maps over 1 MiB: {len(anon)}, "
              f"{sum(m[3] for m in anon) / 1024:.1f} MiB resident")
        print(f"  made since and alive: {st.get('new_objects')} objects, "
              f"{st.get('new_bytes', 0) / 2**20:.1f} MiB, in {st.get('new_regions_1mib')} of "
              f"{st.get('all_regions_1mib')} 1 MiB ranges; {st.get('new_by_type', [])[:8]}; "
              f"held by {st.get('new_owners', [])[:8]}")
    if not (folder / "snap-0.tm").exists() or len(stats) < 3:
        return
    keep = [tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "*/memsnap/sitecustomize.py")]  # the probe's own
    snap = [tracemalloc.Snapshot.load(str(folder / f"snap-{k}.tm")).filter_traces(keep)
            for k in (1, 2, len(stats) - 1)]
    for (a, b), (i, j) in zip(((snap[0], snap[1]), (snap[1], snap[2])),
                              ((1, 2), (2, len(stats) - 1)), strict=True):
        print(f"\nsnap-{j} - snap-{i}, top {top} by line:")
        for d in b.compare_to(a, "lineno")[:top]:
            print(f"  {d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path,
                    default=ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl")
    ap.add_argument("--base", type=Path, help="a checkout to compare with")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--visits", type=int, default=2, help="visits past the TTL before the "
                    "RSS after (each a page run that sweeps and collects)")
    ap.add_argument("--why", action="store_true", help="each session opens the Why panel")
    ap.add_argument("--each", action="store_true", help="RSS after each session closes")
    ap.add_argument("--snapshots", type=Path, help="(with --each) the server's snapshots here")
    args = ap.parse_args()
    global VISITS, WHY
    VISITS, WHY = args.visits, args.why
    if args.snapshots:
        os.environ["PYTHONPATH"] = str(ROOT / "benchmarks" / "memsnap")  # the servers' only
    from playwright.sync_api import sync_playwright

    roots = {"this": ROOT} | ({"other": args.base.resolve()} if args.base else {})
    runs: dict[str, list[dict]] = {name: [] for name in roots}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        for r in range(args.rounds):
            for name in (list(roots) if r % 2 == 0 else list(roots)[::-1]):
                log = Path(f"/tmp/trace_memory_{name}.log")
                snaps = args.snapshots and args.snapshots / f"{name}-{r}"
                if snaps:
                    snaps.mkdir(parents=True)
                    os.environ["RADIXLENS_MEMSNAP"] = str(snaps.resolve())
                out = (one_each(browser, roots[name], args.trace.resolve(), args.sessions, log,
                                snaps) if args.each else
                       one(browser, roots[name], args.trace.resolve(), args.sessions, log))
                runs[name].append(out)
                print(json.dumps({"checkout": name, "round": r, **out}), flush=True)
        browser.close()
    for folder in sorted(args.snapshots.iterdir()) if args.snapshots else ():
        print(f"\n{folder.name}:")
        diffs(folder)
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
