"""How fast radix/watch keeps up, and how long a prefill takes to reach a watcher's view.

1. Throughput: a publisher process sends pre-encoded synthetic batches (each a step of a busy
   server: `--events` events, a BlockStored of 4 blocks of 16 tokens or a BlockRemoved) on a
   PUB socket as fast as it can (no high-water mark: nothing is dropped); the subscriber (a
   `Watcher`, this process) applies them. Reported: batches and events per second applied (from
   the publisher's first send to the last batch applied), the publisher's own send rate, and
   the cost of decode + apply alone (no sockets).
2. Latency: `engine serve`'s pieces in process (an EngineService on SmolLM2, CPU, with the ZMQ
   publisher) and a Watcher in a thread; for each request, the time from the end of the step
   that prefilled it (the batch's ts) to the watcher receiving that batch. The page redraws
   every second (pages/watch.py), so drawn = this + up to 1 s + the browser's render.
Run: python benchmarks/watch.py [--batches N] [--events K] [--requests R] [--skip-latency]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from radix.blocks.kv_events import EventBatch, decode_batch, encode_batch  # noqa: E402
from radix.events import BlockRemoved, BlockStored  # noqa: E402
from radix.watch.subscriber import Endpoint, Watcher  # noqa: E402
from radix.watch.view import WorkerCache  # noqa: E402
from radix.watch.wire import seq_bytes  # noqa: E402


def synthetic_payloads(n: int, events_per_batch: int) -> list[bytes]:
    """Steps of a busy server: chains of 4 blocks stored, older blocks removed one by one."""
    out, next_hash, live = [], 1, []
    for i in range(n):
        events = []
        for _ in range(events_per_batch):
            if len(live) > 4_000:
                events.append(BlockRemoved((live.pop(0),), "GPU", 0))
            else:
                hashes = tuple(range(next_hash, next_hash + 4))
                next_hash += 4
                events.append(BlockStored(hashes, None, tuple(range(64)), 16, None, "GPU", None,
                                          (None,) * 4, 0, "full_attention"))
                live.extend(hashes)
        out.append(encode_batch(EventBatch(float(i), tuple(events), 0)))
    return out


def _publish(port_q: mp.Queue, go: mp.Event, n: int, events: int, out: mp.Queue) -> None:
    import zmq
    payloads = synthetic_payloads(n, events)
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    port_q.put(pub.bind_to_random_port("tcp://127.0.0.1"))
    go.wait()
    start = time.perf_counter()
    for seq, payload in enumerate(payloads):
        pub.send_multipart((b"", seq_bytes(seq), payload))
    out.put(time.perf_counter() - start)
    go.clear()
    go.wait(120)  # keep the socket until the subscriber is done
    pub.close(linger=0)
    ctx.term()


def throughput(n: int, events: int) -> dict:
    port_q, out, go = mp.Queue(), mp.Queue(), mp.Event()
    proc = mp.Process(target=_publish, args=(port_q, go, n, events, out), daemon=True)
    proc.start()
    port = port_q.get(timeout=60)
    with Watcher([Endpoint(f"tcp://127.0.0.1:{port}", None)], replay_timeout=0.5) as w:
        w.poll(0.2)  # the subscription reaches the publisher (ZMQ's slow joiner) ...
        time.sleep(0.5)  # ... before the first batch is sent
        start = time.perf_counter()  # from the first send (go releases the publisher), not the
        go.set()  # first apply: one poll may drain every queued batch (issue 25: 0.0 s)
        stream = w.streams[0]
        deadline = start + 300
        while stream.expected != n and time.perf_counter() < deadline:
            w.poll(0.01)
        elapsed = time.perf_counter() - start
        status = w.status()[0]
    send_s = out.get(timeout=60)
    go.set()
    proc.join(10)
    payloads = synthetic_payloads(min(n, 20_000), events)
    cache, t0 = WorkerCache(), time.perf_counter()
    for p in payloads:
        cache.apply(decode_batch(p))
    apply_s = (time.perf_counter() - t0) / len(payloads)
    return {"batches": n, "events_per_batch": events, "applied": status.applied,
            "lost": status.lost, "seconds": round(elapsed, 3),
            "batches_per_s": round(status.applied / elapsed),
            "events_per_s": round(status.applied * events / elapsed),
            "publisher_batches_per_s": round(n / send_s),
            "decode_apply_us_per_batch": round(apply_s * 1e6, 1)}


def latency(requests: int) -> dict:
    from engine.kv_publisher import ZmqEventPublisher
    from engine.model import load_model
    from engine.sampling import SamplingParams
    from engine.service import EngineService

    loaded = load_model(device="cpu")
    pub = ZmqEventPublisher(0, "tcp://*:0", "tcp://*:0")
    sent: dict[float, float] = {}  # batch ts -> when the publisher was handed it

    class Stamp:
        def publish(self, batch: EventBatch) -> None:
            sent[batch.ts] = time.time()
            pub.publish(batch)

    w = Watcher([Endpoint(pub.endpoint.replace("*", "127.0.0.1"),
                          pub.replay_endpoint.replace("*", "127.0.0.1"))], replay_timeout=2)
    stop = threading.Event()
    seen: list[tuple[float, float]] = []  # (batch ts, received)
    orig = w.streams[0].cache.apply

    def apply(batch, seq=None, at=0.0):
        seen.append((batch.ts, at))
        return orig(batch, seq, at)
    w.streams[0].cache.apply = apply

    def poll() -> None:
        while not stop.is_set():
            w.poll(0.01)
    thread = threading.Thread(target=poll, daemon=True)
    with EngineService(loaded, 8_192, kv_events=Stamp()) as service:
        w.poll(0.2)
        thread.start()
        service.submit("warm up", 1).result(60)
        time.sleep(0.5)
        seen.clear()
        for i in range(requests):
            text = f"Request {i}: describe a hiking trail number {i} in the Alps in one line."
            service.submit(text, 2, sampling=SamplingParams(), chat=True).result(120)
        end = time.time() + 5
        while len(seen) < requests and time.time() < end:
            time.sleep(0.01)
    stop.set()
    thread.join(5)
    w.close()
    pub.close()
    lat = sorted((recv - ts) * 1e3 for ts, recv in seen)
    return {"requests": requests, "batches": len(lat),
            "prefill_to_view_ms_p50": round(statistics.median(lat), 2),
            "prefill_to_view_ms_p90": round(lat[int(0.9 * (len(lat) - 1))], 2),
            "prefill_to_view_ms_max": round(lat[-1], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=50_000)
    ap.add_argument("--events", type=int, default=4, help="events per batch")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--skip-latency", action="store_true")
    args = ap.parse_args()
    result = {"throughput": [throughput(args.batches, k) for k in sorted({1, args.events})]}
    if not args.skip_latency:
        result["latency"] = latency(args.requests)
    print(json.dumps(result, indent=2))
    print(f"\n{'events/batch':>12} {'batches/s':>10} {'events/s':>10} {'lost':>5} "
          f"{'publisher b/s':>14} {'decode+apply µs/batch':>22}")
    for t in result["throughput"]:
        print(f"{t['events_per_batch']:>12} {t['batches_per_s']:>10,} {t['events_per_s']:>10,} "
              f"{t['lost']:>5} {t['publisher_batches_per_s']:>14,} "
              f"{t['decode_apply_us_per_batch']:>22}")
    if "latency" in result:
        lat = result["latency"]
        print(f"\nprefill -> watcher's view: p50 {lat['prefill_to_view_ms_p50']} ms, p90 "
              f"{lat['prefill_to_view_ms_p90']} ms, max {lat['prefill_to_view_ms_max']} ms "
              f"({lat['batches']} batches of {lat['requests']} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
