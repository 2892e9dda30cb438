"""The Trace debugger folds a KV-event recording as `radix watch --read` does.

One recording in `radix watch --record`'s format (records with seq, receive time, source): a
publisher stores chain 1-2-3 (seq 0) and 4 under 3 (seq 1), restarts (seq 0 again: a new engine,
its pool empty), stores 10-11 (seq 0) and 12 (seq 1), then seq 2 is missing and seq 3 stores 13.
`watch --read` ends with blocks {10, 11, 12, 13}, one restart, seq 2 lost; stored minus removed
would say 8. The Trace debugger's fold, its table and the page show the same 4 blocks, and
times as UTC dates, not 1.79617e+09.
"""

from __future__ import annotations

import json
import subprocess
import sys

from apphelp import ROOT, finish_jobs, page, plain

from radix.blocks.kv_events import EventBatch, encode_batch
from radix.events import BlockStored
from radix.watch.recording import record_bytes
from scenarios.trace import replay
from viz.recording import recording_rows

SOURCE = "tcp://10.0.0.7:5557"
T0 = 1_796_170_000.0  # 2026-12-02 00:06:40 UTC


def _stored(hashes: tuple[int, ...], parent: int | None) -> BlockStored:
    tokens = tuple(t for h in hashes for t in (h, h))
    return BlockStored(hashes, parent, tokens, 2, None, "GPU", None)


def recording() -> bytes:
    script = [(0, (1, 2, 3), None), (1, (4,), 3),  # the first publisher
              (0, (10, 11), None), (1, (12,), 11), (3, (13,), 12)]  # restarted; seq 2 lost
    out = b""
    for i, (seq, hashes, parent) in enumerate(script):
        payload = encode_batch(EventBatch(T0 + i, (_stored(hashes, parent),), 0))
        out += record_bytes(payload, seq, T0 + i + 0.25, SOURCE)
    return out


def test_the_folded_pool_equals_watch_read(tmp_path):
    data = recording()
    path = tmp_path / "watch.msgpack"
    path.write_bytes(data)
    proc = subprocess.run([sys.executable, "-m", "radix", "watch", "--read", str(path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (worker,) = json.loads(proc.stdout)["workers"]
    watched = [b["hash"] for b in worker["blocks"]]
    assert watched == [10, 11, 12, 13]
    r = replay(data, "watch.msgpack")
    (source,) = r.recording.sources
    assert [b.block_hash for b in source.view.blocks] == watched
    assert source.stored_blocks - source.removed_blocks == 8  # the totals' answer, wrong
    status = source.view.status
    assert (status.restarts, status.lost) == (worker["status"]["restarts"],
                                              worker["status"]["lost"]) == (1, 1)
    assert status.view_state() == "INCOMPLETE since seq 2"
    (row,) = recording_rows(r.recording)
    assert row["blocks cached"] == 4 and row["seqs"] == "0 .. 3"
    assert row["batch times"] == "2026-12-02 00:06:40.000 UTC .. 00:06:44.000 UTC (4.00 s)"
    assert [len(run.block_hashes) for run in source.view.runs] == [4]  # 10-11-12-13, one chain


def test_a_plain_recording_folds_in_file_order():
    """The same batches without seqs (`watch --plain`): no restart can be seen from seqs, so the
    first publisher's 4 blocks stay; the view is exact with every block stored (8)."""
    from radix.watch.recording import read_recording
    plain_bytes = b"".join(r.payload for r in read_recording(recording()))
    (source,) = replay(plain_bytes, "plain.msgpack").recording.sources
    assert len(source.view.blocks) == 8 and source.first_seq is None
    assert source.view.status.view_state() == "exact"


def test_the_page_draws_the_final_pool_with_readable_times():
    at = page("trace").run()
    at.file_uploader(key="trace.upload").set_value(("watch.msgpack", recording(),
                                                    "application/octet-stream")).run()
    finish_jobs(at)
    assert not at.exception and not at.error
    assert "KV-events recording" in plain(at.subheader[0].value)
    (row,) = at.dataframe[0].value.to_dict("records")
    assert row["blocks cached"] == 4 and row["restarts"] == 1
    shown = " ".join([at.info[0].value, *(c.value for c in at.caption), row["batch times"]])
    assert "2026-12-02 00:06:40" in shown and "e+09" not in shown
    assert any("4 blocks of 2 tokens cached" in c.value for c in at.caption)
