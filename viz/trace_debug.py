"""The Trace debugger's model: load any trace, replay it through both caches, keep the tree's log.

Follows `radix.runs.compare` for the side-by-side summary (the same capacity for the radix tree and
the block cache, SGLang's and vLLM's per-request flows). The tree is run a second time with an
EventLog sink and `check_invariants()` after every request (op traces: after every op), so the
page can scrub to any step and name the first step where an invariant broke.
Big trees: `step_highlight` marks what a step touched, so viz/dot.py's fold always draws it, and
`text_head` cuts pretty_print's text for the page (the whole text goes to a download).
Leaves out: batching (see the Scheduler page); kv_events recordings have no tree replay
(`kv_events_summary` says what the recording holds instead).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix import events as ev
from radix.runs.compare import compare, output_tokens, run_tree, trace_reqs
from radix.runs.ops import replay_ops
from radix.traces import Trace, load_trace
from radix.tree.eventlog import EventLog
from radix.tree.inspect import InvariantError
from radix.tree.radix_cache import RadixCache


class TraceReplay(NamedTuple):
    trace: Trace
    summary: dict[str, Any] | None  # cmd_compare.compare's result; None for op traces
    log: EventLog  # the tree's events, step by step
    first_bad_step: int | None  # first log step after which check_invariants failed
    violation: str | None  # its message


def _run_tree_logged(trace: Trace, capacity: int, page_size: int) -> tuple[EventLog, Any, Any]:
    """cmd_compare.run_tree's flow with a sink and an invariant check after each request."""
    log = EventLog(page_size=page_size)
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    try:
        run_tree(trace_reqs(trace), outputs, capacity, page_size, sink=log,
                 after_request=RadixCache.check_invariants)
    except InvariantError as exc:
        return log, log.num_steps - 1, str(exc)
    return log, None, None


def replay_trace(data: bytes, capacity: int = 1_000_000, page_size: int = 1,
                 block_size: int = 16) -> TraceReplay:
    """Loads `data` (any format of radix/trace.py; TraceError names line and field) and replays.

    Two requests of one output token each log 1 + 2 x 3 = 7 steps: reset, then per request
    match_prefix, inc_lock_ref and cache_finished_req (its insert and unlock inside one step).
    """
    trace = load_trace(data)
    if trace.format == "ops":
        log = EventLog()
        result = replay_ops(trace.ops, sink=log)
        bad = None
        if result.first_bad_line is not None:
            bad = log.num_steps - 1  # the check runs after every op; see `violation` for the line
            result.violation = f"after the op on line {result.first_bad_line}: {result.violation}"
        return TraceReplay(trace, None, log, bad, result.violation)
    summary = compare(trace, capacity, page_size, block_size)
    log, bad, violation = _run_tree_logged(trace, capacity, page_size)
    return TraceReplay(trace, summary, log, bad, violation)


def snapshot_json(snapshot: Any) -> dict[str, Any]:
    """A TreeSnapshot as plain JSON-able data (for the download button)."""
    return {
        "step": snapshot.step, "page_size": snapshot.page_size,
        "evictable_size": snapshot.evictable_size, "protected_size": snapshot.protected_size,
        "nodes": [n._asdict() for n in snapshot.nodes],
    }


# A node touched twice in one step keeps its strongest role: a new leaf over its match.
_RANK = {"new": 0, "split": 1, "lock": 2, "matched": 3}


def step_highlight(events: list[Any], snapshot: Any) -> dict[int, str]:
    """Node id -> role (viz.dot.ROLES) for what one step did, over the nodes still in `snapshot`.

    insert [1, 2, 3], then insert [1, 2, 4]: node 1 splits into prefix 2 + node 1, leaf 3
    grows, the insert's hit count touches 2 and 3: {1: "split", 2: "split", 3: "new"}
    (split and new outrank matched).
    """
    roles: dict[int, str] = {}

    def mark(ids: Any, role: str) -> None:
        for i in ids:
            if _RANK[role] < _RANK.get(roles.get(i, ""), 9):
                roles[i] = role

    for e in events:
        if isinstance(e, ev.NodeInserted):
            mark([e.node_id], "new")
        elif isinstance(e, ev.NodeSplit):
            mark([e.node_id, e.new_node_id], "split")
        elif isinstance(e, ev.LockChanged):
            mark([e.node_id], "lock")
        elif isinstance(e, ev.PrefixMatched | ev.HitCounted):
            mark(e.node_ids, "matched")
    present = {n.id for n in snapshot.nodes}
    return {i: r for i, r in roles.items() if i in present and i != snapshot.nodes[0].id}


def text_head(text: str, max_lines: int = 200) -> tuple[str, str | None]:
    """The first `max_lines` lines of `text`, and a note saying how many were left out (None
    when nothing was): 1,000 lines, 200 kept -> "first 200 of 1,000 lines; …"."""
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text, None
    return ("\n".join(lines[:max_lines]),
            f"first {max_lines:,} of {len(lines):,} lines; download the whole text below")


def kv_events_summary(trace: Trace) -> str:
    """What a vLLM KV-events recording holds, for the page that cannot replay it as a tree.

    examples/traces/kv_events.jsonl: 3 batches (ts 0 .. 2), 3 BlockStored events storing 271
    blocks (x 16 = 4,336 tokens), 22 BlockRemoved events removing 22 blocks, 0 AllBlocksCleared.
    """
    batches = trace.batches or []
    events = [e for b in batches for e in b.events]
    stored = [e for e in events if type(e).__name__ == "BlockStored"]
    removed = [e for e in events if type(e).__name__ == "BlockRemoved"]
    cleared = len(events) - len(stored) - len(removed)
    blocks = sum(len(e.block_hashes) for e in stored)
    tokens = sum(len(e.block_hashes) * e.block_size for e in stored)
    span = f" (ts {batches[0].ts:g} .. {batches[-1].ts:g})" if batches else ""
    return (f"{len(batches):,} batches{span}: {len(stored):,} BlockStored events storing "
            f"{blocks:,} blocks ({tokens:,} tokens), {len(removed):,} BlockRemoved events removing "
            f"{sum(len(e.block_hashes) for e in removed):,} blocks, {cleared:,} AllBlocksCleared. "
            "A KV-events recording has block hashes, not requests, so there is no tree or block "
            "pool to replay here.")
