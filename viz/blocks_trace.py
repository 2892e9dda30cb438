"""The Trace debugger's block view: vLLM's block cache after the first n requests of a trace.

Follows `radix.runs.compare.run_blocks` (same capacity, same per-request flow: get_computed_blocks,
allocate_slots for the prompt, one slot per decode token, free), stopping after `num_requests`
requests so the page can show the pool beside the tree at the chosen step. A test holds it to
run_blocks' totals. Granularity: whole requests (the tree's steps inside a request map to the
pool after the requests finished before it). Cost: one replay of the first n requests per view
(the 200-line Mooncake excerpt, 2.7 M tokens: under a second).
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from radix import events as ev
from radix.blocks.manager import BlockCacheManager, LookupRecord
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockPoolSnapshot
from radix.request import Req
from radix.runs.compare import output_tokens, run_blocks, trace_reqs
from radix.traces.base import Trace
from radix.tree.eventlog import EventLog
from viz.blocks_chain import lookup_line, request_chain


class BlockReplay(NamedTuple):
    snapshot: BlockPoolSnapshot  # the pool after `num_requests` requests
    lookups: dict[str, LookupRecord]  # rid -> its lookup, for the requests replayed
    reqs: dict[str, Req]  # rid -> the request (prompt, extra_key, cache_salt)
    num_requests: int  # requests replayed
    rejected: list[str]  # rids the pool could not hold
    num_evictions: int  # cached blocks whose hash was dropped to reuse the block


def request_ends(log: EventLog) -> list[int]:
    """The last log step of each request, in order (steps without a rid are skipped)."""
    last: dict[str, int] = {}
    for step in range(log.num_steps):
        rid = log.events_of(step)[0].rid
        if rid is not None:
            last[rid] = step
    return sorted(last.values())


def requests_done(ends: list[int], step: int) -> int:
    """Requests whose every step is among the first `step` steps of the log.

    >>> requests_done([3, 6], 3), requests_done([3, 6], 4), requests_done([3, 6], 7)
    (0, 1, 2)
    """
    return bisect.bisect_left(ends, step)


def tree_matches(log: EventLog) -> dict[str, int]:
    """rid -> tokens the tree matched at its match_prefix step."""
    out: dict[str, int] = {}
    for step in range(log.num_steps):
        first = log.events_of(step)[0]
        if first.op == "match_prefix" and first.rid is not None:
            for e in log.micro_events(step):
                if isinstance(e, ev.PrefixMatched):
                    out[first.rid] = e.prefix_len
    return out


def replay_blocks(trace: Trace, capacity: int, block_size: int = 16,
                  num_requests: int | None = None) -> BlockReplay:
    """run_blocks' flow over the first `num_requests` requests (all when None)."""
    n = len(trace.requests) if num_requests is None else min(num_requests, len(trace.requests))
    manager = BlockCacheManager(BlockPool(capacity // block_size + 1, block_size=block_size))
    reqs = trace_reqs(trace)[:n]
    outputs = [output_tokens(trace, i) for i in range(n)]
    rejected: list[str] = []
    run_blocks(reqs, outputs, capacity, block_size, manager=manager, rejected_rids=rejected)
    lookups = {req.rid: rec for req, rec in zip(reqs, manager.lookups)}  # one lookup a request
    return BlockReplay(manager.snapshot(), lookups, {r.rid: r for r in reqs}, n, rejected,
                       manager.pool.num_evictions)


def chain_view(replay: BlockReplay, rid: str, tree_hit: int | None) -> tuple[list[int], str]:
    """Block ids of `rid`'s cached chain now, and where its lookup stopped (beside the tree)."""
    req = replay.reqs[rid]
    links = request_chain(replay.snapshot, req.origin_input_ids, req.extra_key, req.cache_salt)
    text = lookup_line(replay.lookups[rid], replay.snapshot.block_size, tree_hit)
    if rid in replay.rejected:
        text += " The pool could not hold it: rejected."
    return [lk.block_id for lk in links if lk.block_id is not None], text
