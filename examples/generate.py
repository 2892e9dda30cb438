"""`python -m examples.generate OUTDIR [--small]`: write every scenario as a request trace.

Writes OUTDIR/<scenario>.jsonl.gz for each of examples.workloads.SCENARIOS (gzip: a shared prefix
repeats on every line and compresses away), a KV-event recording of the three-request walk
through vLLM's block pool (kv_events.msgpack and its JSON-lines rendering kv_events.jsonl), and,
and the first 200 lines of the Mooncake sample (traces/mooncake_synthetic_trace.jsonl.gz) as
mooncake_excerpt.jsonl.
`--small` shrinks the big scenarios (the files in examples/traces/ are written with it).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
from collections.abc import Sequence
from pathlib import Path

from examples.workloads import SCENARIOS
from radix.blocks.kv_events import EventBatch, batch_to_json, encode_batch
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import AllBlocksCleared, BlockRemoved, BlockStored, ListSink
from radix.traces.requests import dumps_requests
from radix.traces.trace import TraceRequest, to_req

KV_EVENTS = (BlockStored, BlockRemoved, AllBlocksCleared)
REPO = Path(__file__).resolve().parent.parent
MOONCAKE_SAMPLE = REPO / "examples" / "traces" / "mooncake_synthetic_trace.jsonl.gz"
SMALL = {  # scenario -> keyword arguments for the small ready files
    "eviction_question": {"num_live": 40},
    "customer_support": {"num_users": 12},
    "rag": {"num_requests": 20},
}


def kv_event_recording(requests: Sequence[TraceRequest], num_blocks: int = 250,
                       block_size: int = 16) -> list[EventBatch]:
    """Each request in turn through a BlockCacheManager (look up, allocate, free); the vLLM KV
    events of each call become one EventBatch stamped with the call's index in seconds.

    With the three-request walk and 250 blocks, R3 evicts some of R1's cached blocks, so the
    recording has BlockStored and BlockRemoved events.
    """
    sink = ListSink()
    manager = BlockCacheManager(BlockPool(num_blocks, block_size, sink=sink))
    batches: list[EventBatch] = []

    def close_batch(start: int) -> None:
        kv = tuple(e for e in sink.events[start:] if isinstance(e, KV_EVENTS))
        if kv:
            batches.append(EventBatch(float(len(batches)), kv, 0))

    for tr in requests:
        req, start = to_req(tr), len(sink.events)
        hit = manager.get_computed_blocks(req)
        manager.allocate_slots(req, len(tr.token_ids) - hit.num_computed_tokens, hit)
        close_batch(start)
        start = len(sink.events)
        manager.free(req)
        close_batch(start)
    return batches


def write_all(outdir: Path, small: bool = False) -> list[Path]:
    """Write every file; returns their paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in SCENARIOS.items():
        requests = make(**(SMALL.get(name, {}) if small else {}))
        path = outdir / f"{name}.jsonl.gz"
        # mtime=0: the same requests give the same bytes
        path.write_bytes(gzip.compress(dumps_requests(requests).encode(), mtime=0))
        written.append(path)
    batches = kv_event_recording(SCENARIOS["three_requests"]())
    (outdir / "kv_events.msgpack").write_bytes(b"".join(encode_batch(b) for b in batches))
    (outdir / "kv_events.jsonl").write_text("".join(batch_to_json(b) + "\n" for b in batches))
    written += [outdir / "kv_events.msgpack", outdir / "kv_events.jsonl"]
    with gzip.open(MOONCAKE_SAMPLE, "rt") as f:
        excerpt = "".join(itertools.islice(f, 200))
    (outdir / "mooncake_excerpt.jsonl").write_text(excerpt)
    written.append(outdir / "mooncake_excerpt.jsonl")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.generate", description=__doc__)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--small", action="store_true", help="the sizes of examples/traces/")
    args = parser.parse_args(argv)
    for path in write_all(args.outdir, args.small):
        print(f"{path}  {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
