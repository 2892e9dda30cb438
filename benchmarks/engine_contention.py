"""Why the in-app engines decoded slowly (#24 item 5): the engine thread against busy Python.

The app's engines ran their forward on a thread of the Streamlit process (engine/service.py);
`engine serve`'s run in a process where little else runs Python. SmolLM2's forward is hundreds
of short torch ops, and each gives up and takes back the GIL; while another thread runs Python
(a page rerun laying out a tree, a fragment's refresh), every take-back can wait for the
interpreter's switch interval (5 ms by default). This prints, in interleaved rounds, the
seconds one request (a ~380-token prompt, 8 new tokens) takes: alone, beside one busy Python
thread, beside it with a 0.5 ms switch interval, and beside it with the forward in its own
process (what the app runs now, engine/remote.py; the child's spawn is not in its seconds);
medians over the rounds. `--hog sort` makes the busy thread hold the GIL in long C calls.
Not part of the test run.

    .venv/bin/python benchmarks/engine_contention.py --rounds 3
    .venv/bin/python benchmarks/engine_contention.py --rounds 3 --hog sort
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.backends import ModelBackend  # noqa: E402
from engine.model import load_model  # noqa: E402
from engine.remote import ProcessBackend  # noqa: E402
from engine.service import EngineService  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are a helpful assistant. " * 60},
            {"role": "user", "content": "What is a radix tree?"}]


def one_request(loaded, ids: list[int], busy: bool, switch_s: float, backend,
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
        with EngineService(loaded, 4_096, backend=backend) as service:
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
    args = ap.parse_args()
    loaded = load_model()
    ids = loaded.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
    cases = {"alone (as serve)": (False, 0.005, ModelBackend),
             "beside a busy Python thread": (True, 0.005, ModelBackend),
             "beside it, switch interval 0.5 ms": (True, 0.0005, ModelBackend),
             "beside it, forward in own process": (True, 0.0005, ProcessBackend)}
    seconds: dict[str, list[float]] = {c: [] for c in cases}
    for _ in range(args.rounds):  # interleaved: the machine's drift hits every case alike
        for case, (busy, switch, backend) in cases.items():
            seconds[case].append(one_request(loaded, ids, busy, switch, backend, args.hog))
    print(f"one request: {len(ids)} prompt tokens + 8 new, {loaded.label}; busy thread: "
          f"{args.hog}; medians of {args.rounds} interleaved rounds")
    for case, xs in seconds.items():
        print(f"  {case:36s} {statistics.median(xs):6.2f} s  (rounds: "
              + ", ".join(f"{x:.2f}" for x in xs) + ")")


if __name__ == "__main__":
    main()
