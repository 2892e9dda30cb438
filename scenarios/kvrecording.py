"""A KV-event recording folded as `radix watch --read` folds it, for the Trace debugger.

The recording's records (radix/watch/recording.py: `radix watch --record` or the Watch page's
download, with seq numbers, receive times and sources; or plain EventBatch streams, msgpack or
JSON lines, whose order stands in for the seq) go through radix.watch's `Stream` per source:
seqs in order, a seq that goes back is a restarted publisher (its pool starts empty), a missing
seq is lost and the view says since when, AllBlocksCleared empties the pool. The result is each
source's final pool as the Watch page draws it (scenarios/watch.py `WorkerView`) with counts
and the time span. Leaves out: rates over time (a recording is shown at its end).
"""

from __future__ import annotations

from typing import NamedTuple

from radix.blocks.hashing import VLLM_NONE_HASH_SEED
from radix.blocks.kv_events import encode_batch
from radix.events import BlockRemoved, BlockStored
from radix.runs.recording import match_recording
from radix.traces import Trace, TraceError, load_trace
from radix.watch.recording import Record, read_recording, replay_recording
from radix.watch.stream import Stream
from scenarios.watch import WorkerView


class SourceFold(NamedTuple):
    view: WorkerView  # the pool at the end of the recording, with its prefix tree
    records: int  # records of this source
    first_seq: int | None  # None: a plain recording (no seq numbers)
    last_seq: int | None
    first_ts: float  # the publisher's batch timestamps (wall-clock seconds in vLLM and SGLang)
    last_ts: float
    first_received: float | None  # when the watcher received them (None: not recorded)
    last_received: float | None
    stored_blocks: int  # blocks in BlockStored events, restarts and clears notwithstanding
    removed_blocks: int  # blocks in BlockRemoved events


class RecordingFold(NamedTuple):
    sources: tuple[SourceFold, ...]  # in the order each source first appears
    with_seqs: bool  # the records carry seq numbers (else restarts cannot be told from seqs)


def records_of(data: bytes, trace: Trace) -> list[Record]:
    """The recording's records: msgpack records as they are; JSON lines (already loaded into
    `trace`) as plain records, in order."""
    if data.lstrip()[:1] in (b"{", b"["):
        return [Record(None, None, None, b, encode_batch(b)) for b in trace.batches]
    return read_recording(data)


def fold_recording(data: bytes, trace: Trace) -> RecordingFold:
    """Each source's records through a `Stream`, as `radix watch --read` does.

    >>> from radix.blocks.kv_events import EventBatch
    >>> from radix.events import AllBlocksCleared
    >>> t = Trace("kv_events", batches=[
    ...     EventBatch(1.0, (BlockStored((1, 2), None, (5, 6, 7, 8), 2, None, "GPU", None),)),
    ...     EventBatch(2.0, (AllBlocksCleared(),))])
    >>> (s,) = fold_recording(b"{}", t).sources
    >>> len(s.view.blocks), s.stored_blocks, s.view.status.view_state()
    (0, 2, 'exact')
    """
    records = records_of(data, trace)
    by_source: dict[str, list[Record]] = {}
    for rec in records:
        by_source.setdefault(rec.source or "recording", []).append(rec)
    streams = replay_recording(records)
    return RecordingFold(tuple(_source(streams[name], recs) for name, recs in by_source.items()),
                         any(r.seq is not None for r in records))


def recording_verdict(trace: Trace, data: bytes, hash_algo: str,
                      seed: str = VLLM_NONE_HASH_SEED) -> tuple[str, str]:
    """A vLLM KV-event recording (`data`) beside a replay of the same requests (`trace`), hash
    by hash (radix.runs.recording), hashed as the replay's blocks are: ("success" | "warning" |
    "error", one line to show). The Trace debugger's recording panel; the page only shows it.

    >>> recording_verdict(Trace("ops"), b"", "vllm-sha256")[1][:28]
    'A ops trace has no token ids'
    """
    if trace.format != "request":
        return ("error", f"A {trace.format} trace has no token ids vLLM could have hashed: "
                         "a recording matches a request trace (tokens or text).")
    try:
        rec = load_trace(data)
        if rec.format != "kv_events":
            raise TraceError(f"that file is a {rec.format} trace, not a KV-event recording "
                             "(EventBatch msgpack or its JSON lines)")
        m = match_recording(trace, rec, hash_algo=hash_algo, seed=seed)
    except (TraceError, ValueError) as exc:
        return ("error", f"KV-event recording: {exc}")
    hint = "" if m.num_matched else (
        " None match: is it the same requests, the same hash (sha256 or its cbor variant) and "
        "the engine's PYTHONHASHSEED as the seed?")
    return ("success" if m.num_matched == m.num_recorded else "warning",
            m.summary().replace("\n", "; ") + "." + hint)


def _source(stream: Stream, recs: list[Record]) -> SourceFold:
    cache = stream.cache
    view = WorkerView(stream.name, stream.status(), cache.block_size, tuple(cache.blocks.values()),
                      frozenset(cache.unreachable()), tuple(cache.runs()), ())
    events = [e for r in recs for e in r.batch.events]
    received = [r.received for r in recs if r.received is not None]
    seqs = [r.seq for r in recs if r.seq is not None]
    return SourceFold(
        view, len(recs), seqs[0] if seqs else None, seqs[-1] if seqs else None,
        recs[0].batch.ts, recs[-1].batch.ts, received[0] if received else None,
        received[-1] if received else None,
        sum(len(e.block_hashes) for e in events if isinstance(e, BlockStored)),
        sum(len(e.block_hashes) for e in events if isinstance(e, BlockRemoved)))
