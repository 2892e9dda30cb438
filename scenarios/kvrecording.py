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

from radix.blocks.kv_events import encode_batch
from radix.events import BlockRemoved, BlockStored
from radix.traces import Trace
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
