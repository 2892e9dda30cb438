"""Every `python -m radix` command's output on the example traces, one file per command.

For refactors that must change no output (issue 39): run it on two checkouts and `diff -r` the
two folders; an empty diff means every command printed, wrote and exited the same, byte for
byte. Each file holds the command, its exit code, stdout, stderr and every file it wrote.

    .venv/bin/python tools/cli_outputs.py OUT_DIR [--root CHECKOUT] [--jobs N] [--list]
    diff -r BASE_OUT OUT_DIR

What runs (about 340 commands, 2-4 minutes on one core): each subcommand's --help; demo;
replay on seeded op traces this file writes (every policy, pages 1 and 4, request ops and plain
ones, a bounded pool); compare, simulate, configs, explain, rates on every trace under
examples/ (unbounded and a tight capacity, page and block sizes, the host tier's three write
policies), cluster and a serial sweep on the small ones, why on examples/why/, watch --read on
the KV-event recordings, and every hostile file of tests/data/bad/ through compare (and the op
traces through replay). The commands run from a scratch folder (links to the checkout's
examples/ and tests/, the op traces, an out/ folder per command), with PYTHONPATH the checkout
and PYTHONHASHSEED=0, so paths read the same in every run; the checkout's and the scratch
folder's absolute paths are written as <ROOT> and <SCRATCH>, and the one wall-clock figure
a command prints (sweep's "8 cells in 0.2 s wall") as <WALL>. Leaves out: `watch` on a live
server, a Ray sweep, engine/ commands (torch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
WALL = re.compile(rb"\b\d+(\.\d+)? s wall\b")  # sweep's wall time: differs run to run
T = "examples/traces/"
MOONCAKE_BIG = T + "mooncake_synthetic_trace.jsonl.gz"
# request traces and a capacity that makes each evict (tokens)
TIGHT = {
    T + "three_requests.jsonl.gz": 3000,
    T + "cold_burst.jsonl.gz": 8000,
    T + "multi_turn.jsonl.gz": 3000,
    T + "eviction_question.jsonl.gz": 3937,
    T + "customer_support.jsonl.gz": 8000,
    T + "rag.jsonl.gz": 8000,
    T + "mooncake_excerpt.jsonl": 200_000,
    MOONCAKE_BIG: 2_000_000,
    "examples/why/floor.jsonl": 400,
}
SMALL = [t for t in TIGHT if "mooncake" not in t]
KV_TRACES = [T + "kv_events.jsonl", T + "kv_events.msgpack"]
SUBCOMMANDS = ("demo", "replay", "compare", "simulate", "configs", "watch", "explain", "why",
               "rates", "cluster", "sweep")
POLICIES = ("lru", "mru", "fifo", "filo", "lfu", "priority", "slru", "tlru")
SCHED = ("lpm", "dfs-weight", "fcfs", "lof", "random", "routing-key")
WRITE = ("write_through", "write_through_selective", "write_back")


def commands(root: Path) -> list[list[str]]:
    """Every command, as the arguments after `python -m radix`."""
    out: list[list[str]] = [["--help"]] + [[c, "--help"] for c in SUBCOMMANDS]
    out += [["demo"], ["demo", "--scenario", "three-requests"]]
    for name in sorted(OP_TRACES):
        out += [["replay", f"ops/{name}.jsonl"], ["replay", f"ops/{name}.jsonl", "--json"]]
    for t, cap in TIGHT.items():
        c = str(cap)
        out += [["compare", t], ["compare", t, "--capacity", c, "--json"],
                ["compare", t, "--capacity", c, "--page-size", "16", "--block-size", "32"],
                ["simulate", t], ["simulate", t, "--capacity", c, "--json"],
                ["simulate", t, "--capacity", c, "--policy", "lpm", "--eviction", "slru",
                 "--page-size", "16"],
                ["simulate", t, "--capacity", c, "--host-ratio", "2,4"],
                ["configs", t, "--jobs", "1"], ["configs", t, "--jobs", "1", "--capacity", c],
                ["rates", t], ["rates", t, "--capacity", c, "--json"],
                ["explain", t, "--jobs", "1", "--quiet", "--capacity", c, "--no-what-if",
                 "--json"]]
        if t != MOONCAKE_BIG:
            out += [["explain", t, "--jobs", "1", "--quiet"],
                    ["explain", t, "--jobs", "1", "--quiet", "--capacity", c, "--host-ratio", "2",
                     "--no-what-if"],
                    ["configs", t, "--jobs", "1", "--capacity", c, "--host-ratio", "2", "--json"]]
    out.append(["explain", MOONCAKE_BIG, "--jobs", "1", "--quiet", "--top", "3"])
    for t in SMALL:
        c = str(TIGHT[t])
        out += [["simulate", t, "--capacity", c, "--host-ratio", "1,3", "--write-policy", w]
                for w in WRITE]
        out += [["simulate", t, "--no-cache"],
                ["simulate", t, "--capacity", c, "--chunk", "512", "--budget", "2048"],
                ["compare", t, "--hash", "vllm-sha256", "--page-size", "4"],
                ["cluster", t, "--replicas", "1,2", "--router", "all"],
                ["cluster", t, "--replicas", "2", "--router", "all", "--capacity", c,
                 "--page-size", "16", "--json"],
                ["cluster", t, "--replicas", "1,2", "--router", "cache-aware,round-robin",
                 "--capacity", c, "--host-ratio", "2"]]
    cs, c = T + "customer_support.jsonl.gz", "8000"
    out += [["simulate", cs, "--capacity", c, "--eviction", p] for p in POLICIES]
    out += [["simulate", cs, "--capacity", c, "--policy", p] for p in SCHED]
    out += [["explain", cs, "--jobs", "1", "--quiet", "--capacity", c, "--eviction", p,
             "--policy", "fcfs", "--no-what-if", "--json"] for p in POLICIES]
    out += [["explain", cs, "--jobs", "1", "--quiet", "--capacity", c, "--host-ratio", "2",
             "--write-policy", w, "--json"] for w in WRITE]
    out += [["rates", cs, "--capacity", c, "--window", "5", "--chunk", "256"],
            ["cluster", T + "mooncake_excerpt.jsonl", "--replicas", "1,2,4", "--router", "all"],
            ["cluster", T + "mooncake_excerpt.jsonl", "--replicas", "2", "--router", "all",
             "--capacity", "200000", "--host-ratio", "2", "--json"]]
    tr = T + "three_requests.jsonl.gz"
    rec = T + "kv_events.msgpack"
    out += [["compare", tr, "--kv-events", rec, "--block-size", "16"],
            ["compare", tr, "--kv-events", T + "kv_events.jsonl", "--hash", "vllm-sha256-cbor"],
            ["compare", tr, "--kv-events", rec, "--hash", "radixlens", "--hash-seed", "7"]]
    for t in KV_TRACES:
        out += [["compare", t], ["simulate", t], ["watch", "--read", t],
                ["watch", "--read", t, "--json"]]
    out.append(["watch", "--read", rec, "--plain", "out/plain.msgpack"])
    out += [["sweep", t, "--serial", "--replicas", "1,2", "--router", "round-robin,cache-aware",
             "--capacity", f"none,{TIGHT[t]}", "--out", "out/sweep.jsonl"]
            for t in (tr, T + "customer_support.jsonl.gz")]
    fl = "examples/why/floor.jsonl"
    out += [["why", "a", "b", "--trace", fl], ["why", "a", "b", "--trace", fl, "--block-size",
                                                 "784"],
            ["why", "a", "b", "--trace", fl, "--json", "--page-size", "16", "--width", "3"],
            ["why", "[1,2,3,4,5,6,7,8]", "[1,2,3,4,5,9,9,9]", "--block-size", "2"],
            ["why", '{"token_ids": [1,2,3], "cache_salt": "x"}', '{"token_ids": [1,2,3]}'],
            ["why", "examples/why/date_a.txt", "examples/why/date_b.txt"],
            ["why", "examples/why/tenant_1.json", "examples/why/tenant_2.json"]]
    bad = root / "tests" / "data" / "bad"
    for f in sorted(p.name for p in bad.iterdir() if p.name != "README.md"):
        out.append(["compare", f"tests/data/bad/{f}"])
        if f.startswith("ops_"):
            out.append(["replay", f"tests/data/bad/{f}"])
    return out


# ------------------------------------------------------------------------------ op traces

def _op_trace(seed: int, page_size: int, policy: str, capacity: int | None,
              requests: bool, num_ops: int = 160) -> str:
    """A seeded op trace: requests (start, extend, decode, unfinished, finished) over a few
    shared prefixes with namespaces and priorities, or plain insert / match / lock (by tokens) /
    evict ops; JSON lines."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(50) for _ in range(rng.randrange(4, 40))] for _ in range(8)]
    config = {"op": "config", "page_size": page_size, "policy": policy}
    if policy == "slru":
        config["policy_config"] = {"protected_threshold": 2}
    if capacity is not None:
        config["capacity"] = capacity
    rows: list[dict] = [config]
    running: dict[str, list[str]] = {}
    n = 0
    while len(rows) <= num_ops:
        roll = rng.random()
        ns = {"extra_key": "lora"} if rng.random() < 0.15 else {}
        prompt = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(1, 12))]
        if requests and len(running) < 4 and (roll < 0.3 or not running):
            rid = f"r{n}"
            n += 1
            rows.append({"op": "start", "rid": rid, "tokens": prompt,
                         "priority": rng.randrange(3), **ns})
            running[rid] = ["extend", "unfinished", *["decode"] * rng.randrange(0, 5),
                            "finished"]
        elif requests and roll < 0.85:
            rid = rng.choice(sorted(running))
            op = running[rid].pop(0)
            row: dict = {"op": op, "rid": rid}
            if op == "decode":
                row["token"] = rng.randrange(50)
            elif op == "unfinished":
                row["chunked"] = rng.random() < 0.5
            rows.append(row)
            if not running[rid]:
                del running[rid]
        elif roll < 0.45:
            rows.append({"op": "insert", "tokens": prompt, "priority": rng.randrange(3),
                         "chunked": rng.random() < 0.2, **ns})
        elif roll < 0.7:
            rows.append({"op": "match", "tokens": prompt, **ns})
        elif roll < 0.73 and not requests:  # stays locked: node ids are not known here
            rows.append({"op": "lock", "tokens": prompt, **ns})
        elif roll < 0.9 and not requests:
            rows.append({"op": "match", "tokens": prompt[: rng.randrange(1, len(prompt) + 1)],
                         **ns})
        else:
            rows.append({"op": "evict", "num_tokens": rng.randrange(1, 30)})
    return "\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n"


# name -> (seed, page size, policy, capacity, request ops)
OP_TRACES = {
    **{f"plain_{p}_page1": (1, 1, p, None, False) for p in POLICIES},
    **{f"requests_{p}_page1": (2, 1, p, 300, True) for p in ("lru", "lfu", "priority", "slru")},
    "plain_lru_page4": (3, 4, "lru", None, False),
    "requests_fifo_page4": (4, 4, "fifo", 320, True),
    "requests_tlru_page1_unbounded": (5, 1, "tlru", None, True),
}


# ------------------------------------------------------------------------------ running

def slug(argv: list[str]) -> str:
    text = "_".join(a.replace("examples/traces/", "").replace("tests/data/bad/", "bad/")
                    for a in argv)
    text = re.sub(r"[^A-Za-z0-9.,=+-]+", "_", text).strip("_")
    return text[:150] or "radix"


def run_one(argv: list[str], name: str, root: Path, scratch: Path, out_dir: Path,
            python: str) -> float:
    work = scratch / "runs" / name
    (work / "out").mkdir(parents=True)
    for entry in ("examples", "tests", "ops"):
        (work / entry).symlink_to(scratch / entry if entry == "ops" else root / entry)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADIXLENS")}
    env.update(PYTHONPATH=str(root), PYTHONHASHSEED="0", COLUMNS="100", LC_ALL="C.UTF-8",
               TZ="UTC", PYTHONDONTWRITEBYTECODE="1")
    t0 = time.monotonic()
    done = subprocess.run([python, "-m", "radix", *argv], cwd=work, env=env,
                          capture_output=True, timeout=900)
    took = time.monotonic() - t0
    parts = [b"$ python -m radix " + " ".join(argv).encode(),
             b"--- exit " + str(done.returncode).encode(),
             b"--- stdout", done.stdout, b"--- stderr", done.stderr]
    for f in sorted((work / "out").rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            parts += [f"--- file {f.relative_to(work)} ({len(data)} bytes)".encode(), data]
    text = b"\n".join(parts)
    for path, label in ((work, b"<SCRATCH>"), (root, b"<ROOT>")):
        text = text.replace(str(path).encode(), label)
    text = WALL.sub(b"<WALL> s wall", text)
    (out_dir / f"{name}.txt").write_bytes(text)
    shutil.rmtree(work)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="a new or empty folder for the outputs")
    ap.add_argument("--root", type=Path, default=HERE, help="the checkout to run (default: this)")
    ap.add_argument("--python", default=None,
                    help="the interpreter (default: ROOT/.venv/bin/python)")
    ap.add_argument("--jobs", type=int, default=1, help="commands run at once (default 1)")
    ap.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args()
    root = args.root.resolve()
    python = args.python or str(root / ".venv" / "bin" / "python")
    cmds = commands(root)
    names = [slug(a) for a in cmds]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise SystemExit(f"two commands share an output name: {dup[:3]}")
    if args.list:
        for argv in cmds:
            print("python -m radix " + " ".join(argv))
        return 0
    out_dir = args.out_dir.resolve()
    if out_dir.exists() and any(out_dir.iterdir()):
        raise SystemExit(f"{out_dir} is not empty")
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cli_outputs_") as tmp:
        scratch = Path(tmp)
        (scratch / "ops").mkdir()
        for name, spec in OP_TRACES.items():
            (scratch / "ops" / f"{name}.jsonl").write_text(_op_trace(*spec))

        def one(i: int) -> None:
            took = run_one(cmds[i], names[i], root, scratch, out_dir, python)
            print(f"{took:6.1f}s  python -m radix {' '.join(cmds[i])}", flush=True)

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            list(pool.map(one, range(len(cmds))))
    print(f"{len(cmds)} commands of {root} in {time.monotonic() - t0:.0f} s -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
