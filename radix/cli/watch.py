"""`python -m radix watch ENDPOINT...`: subscribe to KV-event publishers and show each worker.

ENDPOINT is `tcp://HOST:PORT` or `tcp://HOST:PORT,tcp://HOST:REPLAY_PORT` (a vLLM or SGLang
server started with --kv-events-config, or `python -m engine serve`); `--dp N` watches ranks
0..N-1 (ports + rank). Prints a line per worker every `--interval` s (blocks, stored/removed per
second, next seq, exact / INCOMPLETE since which seq / UNKNOWN until a batch has arrived,
restarts, malformed frames) until `--duration` (a hard bound: replays and waits stop there
too) or Ctrl-C; `--json` ends with the whole view; `--record FILE` keeps the stream
(radix/watch/recording.py); `--read FILE` shows a recording's views instead of watching (read
within the trace loaders' byte cap, `--limit max_bytes=N`), and with `--plain OUT` writes its
batches without seq and receive time (a plain EventBatch stream).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from radix.cli.options import add_limits, limits_from
from radix.traces.reading import read_bytes
from radix.watch.rates import recent_rates
from radix.watch.recording import Recorder, read_recording, replay_recording
from radix.watch.stream import Stream
from radix.watch.subscriber import MAX_FRAME_BYTES, Watcher, expand_dp, parse_endpoint


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("watch", help="watch KV-event publishers (vLLM, SGLang, engine)")
    p.add_argument("endpoints", nargs="*", metavar="ENDPOINT", help="PUB or PUB,REPLAY")
    p.add_argument("--dp", type=int, default=1, help="data-parallel ranks per endpoint")
    p.add_argument("--topic", default="", help="topic prefix to subscribe to")
    p.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between status lines")
    p.add_argument("--replay-timeout", type=float, default=2.0,
                   help="seconds a replay answer may go quiet between messages (idle timeout)")
    p.add_argument("--record", metavar="FILE", help="append the stream to FILE")
    p.add_argument("--read", metavar="FILE", help="show a recording instead of watching")
    p.add_argument("--plain", metavar="OUT", help="with --read: write the plain batches to OUT")
    p.add_argument("--json", action="store_true", help="end with the views as JSON")
    p.add_argument("--max-frame-mb", type=float, default=MAX_FRAME_BYTES / 2**20,
                   help=f"refuse frames past this many MiB (default {MAX_FRAME_BYTES // 2**20})")
    add_limits(p)
    p.set_defaults(func=run)


def status_line(stream: Stream, now: float) -> str:
    s = stream.status()
    stored, removed = recent_rates(stream.history, now)
    state = s.view_state()
    rank = "-" if s.rank is None else s.rank
    return (f"{s.name}  rank {rank}  blocks {s.blocks:,}  +{stored:,.1f}/s -{removed:,.1f}/s  "
            f"next seq {s.next_seq if s.next_seq is not None else '-'}  {state}  lost {s.lost}"
            f"  restarts {s.restarts}  malformed {s.malformed}"
            + (f" ({s.last_error})" if s.last_error else ""))


def view_json(stream: Stream) -> dict[str, Any]:
    """A stream's status and its blocks (hash, parent, copies, token ids), in storage order."""
    cache = stream.cache
    return {"status": stream.status()._asdict(), "block_size": cache.block_size,
            "blocks": [{"hash": h, "parent": b.parent_block_hash, "copies": cache.copies[h],
                        "token_ids": list(b.token_ids), "seq": b.seq}
                       for h, b in cache.blocks.items()]}


def run(args: argparse.Namespace) -> int:
    if args.read:
        records = read_recording(read_bytes(args.read, limits_from(args).max_bytes)[0])
        if args.plain:
            with open(args.plain, "wb") as out:
                out.writelines(r.payload for r in records)
        return _report(list(replay_recording(records).values()), args.json, time.time())
    if args.plain:
        raise ValueError("--plain goes with --read FILE")
    if not args.endpoints:
        raise ValueError("give an ENDPOINT to watch (or --read FILE)")
    if args.interval <= 0 or args.replay_timeout <= 0 or args.max_frame_mb <= 0:
        raise ValueError("--interval, --replay-timeout and --max-frame-mb must be > 0")
    if args.duration is not None and args.duration < 0:
        raise ValueError(f"--duration must be >= 0, got {args.duration:g}")
    endpoints = expand_dp([parse_endpoint(e) for e in args.endpoints], args.dp)
    end = None if args.duration is None else time.monotonic() + args.duration
    out = open(args.record, "ab") if args.record else None  # noqa: SIM115 - closed below
    try:
        with Watcher(endpoints, topic=args.topic, replay_timeout=args.replay_timeout,
                     sink=Recorder(out) if out else None, deadline=end,
                     max_frame_bytes=max(1, int(args.max_frame_mb * 2**20))) as watcher:
            _loop(watcher, args)
            return _report(watcher.streams, args.json, time.time())
    finally:
        if out is not None:
            out.close()


def _loop(watcher: Watcher, args: argparse.Namespace) -> None:
    end = watcher.deadline  # subtle: the watcher stops its own waits there (replays too)
    next_line = time.monotonic() + args.interval
    try:
        while end is None or time.monotonic() < end:
            watcher.poll(0.05)
            if time.monotonic() >= next_line and not args.json:
                now = time.time()
                print("\n".join(status_line(s, now) for s in watcher.streams), flush=True)
                next_line += args.interval
    except KeyboardInterrupt:
        pass


def _report(streams: list[Stream], as_json: bool, now: float) -> int:
    if as_json:
        print(json.dumps({"workers": [view_json(s) for s in streams]}))
    else:
        print("\n".join(status_line(s, now) for s in streams))
    return 0
