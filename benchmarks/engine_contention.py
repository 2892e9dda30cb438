"""Why the in-app engines decoded slowly (#24 item 5): the engine thread against busy Python.

The app's engines ran their forward on a thread of the Streamlit process (engine/service.py);
`engine serve`'s run in a process where little else runs Python. SmolLM2's forward is hundreds
of short torch ops, and each gives up and takes back the GIL; while another thread runs Python
(a page rerun laying out a tree, a fragment's refresh), every take-back can wait for the
interpreter's switch interval (5 ms by default). This prints, in interleaved rounds, the
seconds one request (a ~380-token prompt, 8 new tokens) takes: alone, beside one busy Python
thread, beside it with a 0.5 ms switch interval, beside it with the forward in its own process
(engine/remote.py: the loop stays on the busy process's thread), and beside it with the whole
engine service in its own process (engine/procservice.py, what the app runs now; its events
feed a LiveTree here, as the page's do); the children's start is not in the seconds. Medians
over the rounds, and each case's ratio to alone. `--hog sort` makes the busy thread hold the
GIL in long C calls; `--cases` picks cases by key. Not part of the test run.

    .venv/bin/python benchmarks/engine_contention.py --rounds 3
    .venv/bin/python benchmarks/engine_contention.py --rounds 3 --hog sort
    .venv/bin/python benchmarks/engine_contention.py --rounds 5 --cases alone,forward,engine
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.model import load_model  # noqa: E402
from engine.procservice import ProcessService  # noqa: E402
from engine.remote import ProcessBackend  # noqa: E402
from engine.service import EngineService  # noqa: E402
from scenarios.live import LiveTree  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are a helpful assistant. " * 60},
            {"role": "user", "content": "What is a radix tree?"}]


def one_request(loaded, ids: list[int], busy: bool, switch_s: float, make,
                hog: str = "spin") -> float:
    """Seconds for one request on a fresh engine, with or without a busy Python thread: `spin`
    runs short bytecodes (it gives the GIL up every switch interval), `sort` sorts 300,000
    floats again and again (one C call that holds the GIL for tens of ms, as a big json.dumps or
    a protobuf serialisation does: no switch interval can take the GIL from it)."""
    stop = threading.Event()
    floats = [random.random() for _ in range(300_000)]

    def spin() -> None:
        x = 0
        while not stop.is_set():
            if hog == "sort":
                sorted(floats)
            else:
                x += sum(range(1_000))

    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_s)
    spinner = threading.Thread(target=spin, daemon=True)
    if busy:
        spinner.start()
    try:
        with make(loaded) as service:
            t0 = time.monotonic()
            service.submit(ids, 8).result(600)
            return time.monotonic() - t0
    finally:
        stop.set()
        sys.setswitchinterval(old)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hog", choices=("spin", "sort"), default="spin",
                    help="what the busy thread runs (see one_request)")
    ap.add_argument("--cases", default="",
                    help="comma-separated keys: alone,busy,switch,forward,engine,engine-idle "
                         "(default all)")
    args = ap.parse_args()
    loaded = load_model()
    ids = loaded.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
    def in_thread(loaded, cap):
        return EngineService(loaded, cap)

    cases = {  # key: (what it is, a busy thread, switch interval, the engine)
        "alone": ("alone (as serve)", False, 0.005, in_thread),
        "busy": ("beside a busy Python thread", True, 0.005, in_thread),
        "switch": ("beside it, switch interval 0.5 ms", True, 0.0005, in_thread),
        "forward": ("beside it, forward in own process", True, 0.0005,
                    lambda loaded, cap: EngineService(loaded, cap, backend=ProcessBackend)),
        "engine": ("beside it, whole engine in own process", True, 0.0005,
                   lambda loaded, cap: ProcessService(loaded, cap, listener=LiveTree())),
        "engine-idle": ("whole engine in own process, no busy thread", False, 0.0005,
                        lambda loaded, cap: ProcessService(loaded, cap, listener=LiveTree())),
    }
    keys = args.cases.split(",") if args.cases else list(cases)
    seconds: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(args.rounds):  # interleaved: the machine's drift hits every case alike
        for k in keys:
            _, busy, switch, engine = cases[k]
            seconds[k].append(one_request(loaded, ids, busy, switch,
                                          functools.partial(engine, cap=4_096), args.hog))
            print(f"  round {len(seconds[k])} {k}: {seconds[k][-1]:.2f} s", flush=True)
    print(f"one request: {len(ids)} prompt tokens + 8 new, {loaded.label}; busy thread: "
          f"{args.hog}; medians of {args.rounds} interleaved rounds")
    base = statistics.median(seconds["alone"]) if "alone" in seconds else None
    for k, xs in seconds.items():
        ratio = f"  {statistics.median(xs) / base:5.2f}x alone" if base else ""
        print(f"  {cases[k][0]:44s} {statistics.median(xs):6.2f} s{ratio}  (rounds: "
              + ", ".join(f"{x:.2f}" for x in xs) + ")")

if __name__ == "__main__":
    main()
