"""viz/files.py: the Trace debugger's download files written step by step (the same lines as
EventLog.to_jsonl, gzipped or a step range), never the whole log in memory, and their sizes said
before they are written."""

from __future__ import annotations

import functools
import gzip
import io
import json
import tracemalloc
from pathlib import Path

from scenarios.trace import replay
from viz.files import (
    estimate_events,
    estimate_tree,
    steps_within,
    tree_json,
    write_events,
    write_tree,
)

ROOT = Path(__file__).resolve().parents[2]
EXCERPT = (ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl").read_bytes()
THREE = gzip.decompress((ROOT / "examples" / "traces" / "three_requests.jsonl.gz").read_bytes())


@functools.cache
def _excerpt():
    return replay(EXCERPT, "excerpt").log


def _written(steps, *args, **kw) -> bytes:
    out = io.BytesIO()
    write_events(out, steps, *args, **kw)
    return out.getvalue()


def test_events_are_the_logs_lines_whole_gzipped_and_by_range():
    """three_requests: the whole log as EventLog.to_jsonl writes it; gzipped, the same after
    gunzip; steps 3..5 the lines of those steps and no others."""
    log = replay(THREE, "three").log
    whole = log.to_jsonl().encode()
    assert _written(log.steps) == whole
    assert gzip.decompress(_written(log.steps, compress=True)) == whole
    lines = whole.splitlines(keepends=True)
    before = sum(len(s) for s in log.steps[:3])
    assert _written(log.steps, 3, 6) == b"".join(
        lines[before:before + sum(len(s) for s in log.steps[3:6])])


def _peak(write) -> tuple[int, int]:
    """(bytes written, peak bytes allocated meanwhile) of `write(sink)`."""

    class Count(io.RawIOBase):
        n = 0

        def write(self, b):
            self.n += len(b)
            return len(b)

    sink = Count()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    write(sink)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return sink.n, peak


def test_writing_the_log_holds_a_buffer_not_the_log():
    """1,000 three-token requests: a log of ~3,000 steps, ~1.4 MB as JSON lines (the
    12k-request trace's: ~2 GB). Written step by step with 16 kB chunks, the writer's peak is
    a third of to_jsonl's (which builds every line, then the whole text: twice the file; the
    writer's few hundred kB are CPython's free lists filling, not the log)."""
    data = "".join(json.dumps({"rid": f"r{i}", "arrival": i, "tokens": [3 * i, 3 * i + 1, 7],
                               "output_len": 1}) + "\n" for i in range(1_000)).encode()
    log = replay(data, "many").log
    _peak(lambda out: write_events(out, log.steps[:10]))  # once before: imports and caches
    whole, peak = _peak(lambda out: write_events(out, log.steps, chunk=16_000))
    built, text_peak = _peak(lambda out: out.write(log.to_jsonl().encode()))
    assert whole == built > 1_400_000 and peak < text_peak / 3, (whole, peak, text_peak)


def test_estimates_exact_when_small_and_close_when_sampled():
    """Up to 48 steps (nodes) serialized whole: exact. The excerpt's first 120 steps from 16
    sampled: within 35% of the written size; gzip's within 50%; its tree's JSON from 16 sampled
    nodes within 35%, without ids within 35%."""
    log = replay(THREE, "three").log
    est = estimate_events(log.steps)
    assert est.exact and est.size == len(log.to_jsonl().encode())
    big = _excerpt()
    real = _written(big.steps, 0, 120)
    est = estimate_events(big.steps, 0, 120, samples=16)
    assert not est.exact and abs(est.size / len(real) - 1) < 0.35, (est, len(real))
    assert abs(est.gz_size / len(gzip.compress(real, 6)) - 1) < 0.5
    snap = big.snapshot_at(120)
    for ids in (True, False):
        out = io.BytesIO()
        write_tree(out, snap, ids)
        est = estimate_tree(snap, ids)
        assert abs(est.size / len(out.getvalue()) - 1) < 0.35, (ids, est, len(out.getvalue()))


def test_tree_json_without_ids_keeps_the_structure():
    """Without ids a node keeps its fields and says its token count; with them, the lists.
    Written a node at a time (ids as text as they are read, gzipped or not): the same bytes
    as json.dumps of the whole."""
    snap = replay(THREE, "three").log.snapshot_at(10)
    full, bare = tree_json(snap), tree_json(snap, ids=False)
    assert [n["num_tokens"] for n in bare["nodes"]] == [len(n["token_ids"]) for n in full["nodes"]]
    assert "token_ids" not in bare["nodes"][1] and full["nodes"][1]["id"] == bare["nodes"][1]["id"]
    for ids in (True, False):
        streamed, zipped = io.BytesIO(), io.BytesIO()
        write_tree(streamed, snap, ids, chunk=100)
        write_tree(zipped, snap, ids, compress=True)
        want = json.dumps(tree_json(snap, ids)).encode()
        assert streamed.getvalue() == gzip.decompress(zipped.getvalue()) == want


def test_a_step_window_fits_its_budget_around_the_step():
    """The excerpt's log around step 500 within ~1 MB: a range holding step 500 whose estimate
    is within twice the budget; a budget over the whole log: the whole log."""
    log = _excerpt()
    lo, hi = steps_within(log.steps, 500, 1_000_000)
    assert lo <= 500 < hi and 0 < estimate_events(log.steps, lo, hi).size < 2_000_000
    assert steps_within(log.steps, 5, 10**12) == (0, log.num_steps)
