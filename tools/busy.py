"""Background load: keep every CPU busy for a bounded time, alone or around a command.

    .venv/bin/python tools/busy.py --seconds 60                 # spin 60 s, then stop
    .venv/bin/python tools/busy.py --seconds 3600 -- .venv/bin/python -m pytest -q

Spins `--procs` processes (default: one per CPU) in a pure-Python loop, like `stress --cpu N`.
Each spinner stops by itself after `--seconds` (checked every few milliseconds), and when the
parent goes away (its parent pid changes), so a killed or interrupted run leaves nothing behind.
With a command after `--`, the spinners run while the command runs and are stopped when it ends
(or at `--seconds`, whichever is first); the command's wall time and exit status are printed and
its status is returned: this is how the suite is shown to pass with both CPUs busy (issue 25).
Leaves out: memory or I/O pressure, priorities (the spinners run at the caller's).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time


def spin(until: float, parent: int) -> None:
    """Burns CPU until the monotonic clock passes `until` or the parent is gone."""
    x = 0
    while time.monotonic() < until and os.getppid() == parent:
        for i in range(20_000):
            x = (x + i * i) % 1_000_003


def start(procs: int, seconds: float) -> list[mp.Process]:
    until = time.monotonic() + seconds
    spinners = [mp.Process(target=spin, args=(until, os.getpid()), daemon=True)
                for _ in range(procs)]
    for p in spinners:
        p.start()
    return spinners


def stop(spinners: list[mp.Process]) -> None:
    for p in spinners:
        p.terminate()
    for p in spinners:
        p.join(5)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, required=True, help="the most the load lasts")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="spinning processes")
    args = ap.parse_args(own)
    if args.seconds <= 0 or args.procs < 1:
        ap.error("--seconds must be > 0 and --procs >= 1")
    spinners = start(args.procs, args.seconds)
    print(f"busy: {args.procs} spinning processes for at most {args.seconds:g} s", flush=True)
    started = time.monotonic()
    try:
        if not command:
            for p in spinners:
                p.join()
            return 0
        status = subprocess.run(command).returncode
    finally:
        stop(spinners)
    print(f"busy: `{' '.join(command)}` exited {status} after {time.monotonic() - started:.1f} s "
          f"with {args.procs} spinning processes", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
