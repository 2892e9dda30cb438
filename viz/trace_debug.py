"""The Trace debugger's model: load any trace, replay it through both caches, keep the tree's log.

Follows `radix.cmd_compare` for the side-by-side summary (the same capacity for the radix tree and
the block cache, SGLang's and vLLM's per-request flows). The tree is run a second time with an
EventLog sink and `check_invariants()` after every request (op traces: after every op), so the
page can scrub to any step and name the first step where an invariant broke.
Leaves out: batching (see the Scheduler page); kv_events recordings have no tree replay.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix.allocator import SlotAllocator
from radix.cmd_compare import compare, output_tokens, trace_reqs
from radix.eventlog import EventLog
from radix.inspect import InvariantError
from radix.key import RadixKey
from radix.oprun import replay_ops
from radix.trace import Trace, load_trace
from radix.tree import RadixCache


class TraceReplay(NamedTuple):
    trace: Trace
    summary: dict[str, Any] | None  # cmd_compare.compare's result; None for op traces
    log: EventLog  # the tree's events, step by step
    first_bad_step: int | None  # first log step after which check_invariants failed
    violation: str | None  # its message


def _take(tree: RadixCache, alloc: SlotAllocator, n: int) -> list[int] | None:
    slots = alloc.alloc(n)
    if slots is None:
        tree.evict(n - alloc.available_size())
        slots = alloc.alloc(n)
    return slots


def _run_tree_logged(trace: Trace, capacity: int, page_size: int) -> tuple[EventLog, Any, Any]:
    """cmd_compare.run_tree's flow with a sink and an invariant check after each request."""
    log = EventLog(page_size=page_size)
    alloc = SlotAllocator(capacity)
    tree = RadixCache(page_size=page_size, allocator=alloc, sink=log)
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    for req, out in zip(trace_reqs(trace), outputs):
        prompt = req.origin_input_ids
        m = tree.match_prefix(RadixKey(prompt[:-1], req.extra_key, req.cache_salt), rid=req.rid)
        tree.inc_lock_ref(m.last_node, rid=req.rid)
        req.last_node, req.prefix_indices = m.last_node, list(m.slot_ids)
        req.cache_protected_len = m.prefix_len
        new = _take(tree, alloc, len(prompt) - m.prefix_len)
        if new is None:
            tree.dec_lock_ref(m.last_node, rid=req.rid)
            continue
        req.slot_ids = list(m.slot_ids) + new
        for j, tok in enumerate(out):
            req.output_ids.append(tok)
            slot = _take(tree, alloc, 1) if j < len(out) - 1 else []
            if slot is None:
                break
            req.slot_ids += slot
        tree.cache_finished_req(req)
        try:
            tree.check_invariants()
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
