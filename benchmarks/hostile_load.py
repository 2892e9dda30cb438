"""`engine serve` under load with hostile clients mixed in (issue 40): what the good clients get.

Starts `python -m engine serve --dp 2` (a tiny random Llama on CPU, the issue's setup; ulimit -n
1,024 for the server, a common default) once per phase and checkout, and runs `--clients`
well-behaved clients at once, each sending `--requests` small completions one after another.
Phase "calm": only them. Phase "hostile": first the hostile ones (1,100 idle connections, 50
slowloris heads, two temperature-1e-40 requests, an 8 MB prompt, a 95 MB Content-Length that
never sends its body, malformed bodies, streams dropped after their first chunk), then the same
good clients; phase "requests": the same without the 1,100 connections. Prints per phase and
checkout: good requests answered, their latency p50 / p99, the server's CPU seconds during the
phase and its peak RSS (VmHWM), what its stderr grew by, /health at the end, and how the
hostile requests were answered (a good request unanswered within GOOD_TIMEOUT_S counts as not
answered; one warm-up request precedes each phase, one untimed calm phase per checkout precedes
all). Rounds alternate the phases and checkouts; medians over rounds.

    nice -n 10 .venv/bin/python benchmarks/hostile_load.py --rounds 2
    nice -n 10 .venv/bin/python benchmarks/hostile_load.py --rounds 2 --other /tmp/main
(--other: a checkout to compare with, e.g. `git archive main | tar -x -C /tmp/main`.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOOD_TIMEOUT_S = 30.0  # a good request unanswered by then counts as not answered
TINY = {"model_type": "llama", "vocab_size": 49152, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 8192}


def start(root: Path, config: str, log: Path) -> tuple[subprocess.Popen, int]:
    """The server from checkout `root`, its open files capped at 1,024; (process, port)."""
    cmd = [sys.executable, "-m", "engine", "serve", "--random-init", config, "--device", "cpu",
           "--dp", "2", "--port", "0", "--capacity", "16384", "--router", "round-robin",
           "--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-replay-endpoint",
           "tcp://127.0.0.1:0"]
    err = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=err, text=True,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                  (1024, 1024)))
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == "ready":
            break
    if not lines or lines[-1].strip() != "ready":
        raise SystemExit(f"{root}: engine serve did not start:\n{''.join(lines)}")
    return proc, int(lines[0].split()[2].rsplit(":", 1)[1].split("/")[0])


def request(port: int, body: bytes | dict, path: str = "/v1/completions",
            timeout: float = 120.0, stream_drop: bool = False) -> tuple[int, float]:
    """(status, seconds); status 0: no answer (refused, reset, timed out)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=raw, headers={"content-type": "application/json"})
        r = conn.getresponse()
        if stream_drop:
            r.read1(64)
            return r.status, time.perf_counter() - t0
        r.read()
        return r.status, time.perf_counter() - t0
    except (OSError, http.client.HTTPException):
        return 0, time.perf_counter() - t0
    finally:
        conn.close()


def good_clients(port: int, clients: int, requests: int) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        for j in range(requests):
            got = request(port, {"prompt": f"Client {i} asks question {j} about tents.",
                                 "max_tokens": 8}, timeout=GOOD_TIMEOUT_S)
            with lock:
                out.append(got)
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def hostile(port: int, flood: bool = True
            ) -> tuple[list[socket.socket], dict[str, list], list[threading.Thread]]:
    """Opens the idle and slowloris connections (`flood`) and starts the hostile requests
    (threads)."""
    held: list[socket.socket] = []
    for _ in range(1_100 if flood else 0):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    for s in held[:50]:
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")  # slowloris
        except OSError:
            pass
    results: dict[str, list] = {}
    cases = {
        "tiny temperature": [{"prompt": "hi there", "max_tokens": 8, "temperature": 1e-40}] * 2,
        "8 MB prompt": [{"prompt": "word " * 1_600_000, "max_tokens": 1}],
        "lone surrogate": [b'{"prompt": "a\\ud800b"}'] * 3,
        "deep JSON": [b"[" * 50_000 + b"]" * 50_000] * 3,
        "boolean max_tokens": [b'{"prompt": "a", "max_tokens": true}'] * 3,
        "dropped stream": [{"prompt": "tell a story", "max_tokens": 64, "stream": True}] * 20,
    }
    threads = []
    for name, bodies in cases.items():
        results[name] = []
        for body in bodies:
            t = threading.Thread(target=lambda n=name, b=body: results[n].append(
                request(port, b, stream_drop=n == "dropped stream")[0]))
            t.start()
            threads.append(t)
    s = socket.create_connection(("127.0.0.1", port), timeout=5)  # 95 MB, never sent
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"content-length: 95000000\r\n\r\n")
    held.append(s)
    return held, results, threads


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


PHASES = ("calm", "requests", "hostile")  # no hostile clients; their requests only; all of them


def phase(root: Path, config: str, name: str, args: argparse.Namespace) -> dict:
    log = Path(tempfile.mkstemp(suffix=".log")[1])
    proc, port = start(root, config, log)
    request(port, {"prompt": "warm up", "max_tokens": 2})  # the first forward is slow
    base, cpu = log.stat().st_size, cpu_s(proc.pid)
    held, results, threads = ([], {}, []) if name == "calm" else hostile(port, name == "hostile")
    try:
        time.sleep(0.0 if name == "calm" else 1.0)  # the hostile requests reach it first
        good = good_clients(port, args.clients, args.requests)
        for t in threads:
            t.join(timeout=60)
        ok = sorted(s for code, s in good if code == 200)
        out = {"answered": len(ok), "sent": len(good),
               "p50_s": statistics.median(ok) if ok else float("nan"),
               "p99_s": ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else float("nan"),
               "server_cpu_s": cpu_s(proc.pid) - cpu,
               "peak_rss_mb": peak_rss_mb(proc.pid), "health": _get(port, "/health"),
               "stderr_kb": (log.stat().st_size - base) / 1024,
               "hostile": {k: sorted(set(v)) for k, v in results.items()}}
    finally:
        for s in held:
            s.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.unlink()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--other", default=None, help="another checkout to run beside this one")
    p.add_argument("--phases", default=",".join(PHASES), help="which phases to run")
    args = p.parse_args()
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115
    json.dump(TINY, config)
    config.close()
    roots = [("this", ROOT)] + ([("other", Path(args.other).resolve())] if args.other else [])
    runs: dict[tuple[str, str], list[dict]] = {}
    for _, root in roots:  # untimed: the first server start of a run pays for cold files
        phase(root, config.name, "calm", argparse.Namespace(clients=10, requests=1))
    for r in range(args.rounds):
        order = [(name, root, ph) for ph in PHASES for name, root in roots
                 if ph in args.phases.split(",")]
        for name, root, ph in (order if r % 2 == 0 else order[::-1]):
            got = phase(root, config.name, ph, args)
            runs.setdefault((name, ph), []).append(got)
            print(json.dumps({"round": r, "checkout": name, "phase": ph, **got}), flush=True)
    print(f"\n{'checkout':<9}{'phase':<9}{'answered':>12}{'p50 s':>8}{'p99 s':>8}"
          f"{'server CPU s':>14}{'peak RSS MB':>13}{'stderr KB':>11}{'health':>8}")
    for (name, ph), rs in runs.items():
        m = {k: statistics.median(x[k] for x in rs) for k in (
            "answered", "p50_s", "p99_s", "server_cpu_s", "peak_rss_mb", "stderr_kb")}
        answered = f"{m['answered']:.0f}/{rs[0]['sent']}"
        print(f"{name:<9}{ph:<9}{answered:>12}{m['p50_s']:>8.2f}{m['p99_s']:>8.2f}"
              f"{m['server_cpu_s']:>14.1f}{m['peak_rss_mb']:>13.0f}{m['stderr_kb']:>11.0f}"
              f"{rs[-1]['health']:>8}")
    Path(config.name).unlink()


if __name__ == "__main__":
    main()
