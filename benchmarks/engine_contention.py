"""Why the in-app engines decode slowly (#24 item 5): the engine thread against busy Python.

The app's engines run on a thread of the Streamlit process (engine/service.py); `engine serve`'s
run in a process where little else runs Python. SmolLM2's forward is hundreds of short torch
ops, and each gives up and takes back the GIL; while another thread runs pure Python (a page
rerun laying out a tree, a fragment's refresh), every take-back can wait for the interpreter's
switch interval (5 ms by default). This prints, in interleaved rounds, the seconds one request
(a ~380-token prompt, 8 new tokens) takes: alone, beside one busy Python thread, and beside it
with a 0.5 ms switch interval; medians over the rounds. Not part of the test run.

    .venv/bin/python benchmarks/engine_contention.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.model import load_model  # noqa: E402
from engine.service import EngineService  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are a helpful assistant. " * 60},
            {"role": "user", "content": "What is a radix tree?"}]


def one_request(loaded, ids: list[int], busy: bool, switch_s: float) -> float:
    """Seconds for one request on a fresh engine, with or without a busy Python thread."""
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += sum(range(1_000))

    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_s)
    spinner = threading.Thread(target=spin, daemon=True)
    if busy:
        spinner.start()
    try:
        with EngineService(loaded, 4_096) as service:
            t0 = time.monotonic()
            service.submit(ids, 8).result(600)
            return time.monotonic() - t0
    finally:
        stop.set()
        sys.setswitchinterval(old)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    loaded = load_model()
    ids = loaded.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
    cases = {"alone (as serve)": (False, 0.005), "beside a busy Python thread": (True, 0.005),
             "beside it, switch interval 0.5 ms": (True, 0.0005)}
    seconds: dict[str, list[float]] = {c: [] for c in cases}
    for _ in range(args.rounds):  # interleaved: the machine's drift hits every case alike
        for case, (busy, switch) in cases.items():
            seconds[case].append(one_request(loaded, ids, busy, switch))
    print(f"one request: {len(ids)} prompt tokens + 8 new, {loaded.label} on "
          f"{loaded.device.type}; medians of {args.rounds} interleaved rounds")
    for case, xs in seconds.items():
        print(f"  {case:36s} {statistics.median(xs):6.2f} s  (rounds: "
              + ", ".join(f"{x:.2f}" for x in xs) + ")")


if __name__ == "__main__":
    main()
