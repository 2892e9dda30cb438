"""The Trace debugger's words for a KV-event recording folded as `radix watch --read` folds it.

Reads a `scenarios.kvrecording.RecordingFold` (duck-typed): one table row per source (records,
seqs, restarts, lost seqs, whether the final pool is exact, its block count beside the stored and
removed totals that ignore restarts and clears) and the time span in readable UTC times, not
`1.79617e+09`. The pool and its prefix tree are drawn by viz/cluster.py, as the Watch page draws
a worker. Leaves out: the fold itself (scenarios/kvrecording.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

EPOCH_AFTER = 1e8  # a timestamp past this (March 1973) is wall-clock seconds since 1970


def when(ts: float | None) -> str:
    """A timestamp as people read it: wall-clock seconds as UTC date and time (milliseconds),
    anything smaller (a logical clock, seconds from a start) as it is.

    >>> when(1796170000.25), when(2.0), when(None)
    ('2026-12-02 00:06:40.250 UTC', '2', '-')
    """
    if ts is None:
        return "-"
    if abs(ts) < EPOCH_AFTER:
        return f"{ts:g}"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def span(first: float, last: float) -> str:
    """'2026-12-02 00:06:40.250 UTC .. 00:07:10.000 UTC (29.75 s)': the second time without its
    date when both fall on one day.

    >>> span(1796170000.25, 1796170030.0)
    '2026-12-02 00:06:40.250 UTC .. 00:07:10.000 UTC (29.75 s)'
    >>> span(0.0, 2.0)
    '0 .. 2'
    """
    a, b = when(first), when(last)
    if abs(first) < EPOCH_AFTER:
        return f"{a} .. {b}"
    if a[:10] == b[:10]:
        b = b[11:]
    return f"{a} .. {b} ({last - first:,.2f} s)"


def recording_rows(fold: Any) -> list[dict[str, Any]]:
    """One row per source: what the fold found and the pool it ends with."""
    rows = []
    for s in fold.sources:
        st = s.view.status
        seqs = "-" if s.first_seq is None else f"{s.first_seq:,} .. {s.last_seq:,}"
        rows.append({
            "source": s.view.name, "records": s.records, "seqs": seqs,
            "restarts": st.restarts, "lost seqs": st.lost, "final pool": st.view_state(),
            "blocks cached": len(s.view.blocks), "unreachable": len(s.view.unreachable),
            "blocks stored (all)": s.stored_blocks, "blocks removed (all)": s.removed_blocks,
            "batch times": span(s.first_ts, s.last_ts),
            "received": "-" if s.first_received is None else span(s.first_received,
                                                                   s.last_received)})
    return rows


def recording_text(fold: Any) -> str:
    """The fold in one paragraph: how it was read, and what the counts mean."""
    how = ("seq numbers in order: a seq that goes back is a restarted publisher (its pool starts "
           "empty), a missing seq is lost" if fold.with_seqs else
           "no seq numbers (a plain recording): records in file order, so a restart shows only "
           "through its AllBlocksCleared")
    cached = sum(len(s.view.blocks) for s in fold.sources)
    return (f"{len(fold.sources):,} source(s), folded as 'radix watch --read' folds them ({how}). "
            f"The final pool holds {cached:,} blocks; stored minus removed would say "
            f"{sum(s.stored_blocks - s.removed_blocks for s in fold.sources):,}, because it "
            "ignores restarts, AllBlocksCleared and blocks stored twice.")
