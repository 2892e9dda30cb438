"""A trace's requests as the caches see them, and the replies a run generates for them.

Shared by compare.py, sim.py and explain.py so that all three feed the caches the same tokens.
Prompts stay what the trace holds: plain lists for request traces, TokenRuns (real tokens,
radix/tokens/) for Mooncake traces, whose rows (output_ids, slot_ids) are then RunLists. A
reply is the trace's own when recorded, else distinct synthetic ids: a `range` for plain traces,
one TokenRuns run for compact ones, never a list built up front. Leaves out: tokenizing.
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.request import Req
from radix.tokens import RunList, TokenRuns, is_compact
from radix.traces.base import Trace

OUTPUT_BASE = 1 << 40  # synthetic output tokens: OUTPUT_BASE + (request index << 20) + j
COMPACT_OUTPUT_BASE = 1 << 63  # for compact traces, above every Mooncake token (< 2**63)


def is_compact_trace(trace: Trace) -> bool:
    """True when the trace's prompts are TokenRuns (Mooncake), so rows must stay compact."""
    return bool(trace.requests) and is_compact(trace.requests[0].token_ids)


def trace_reqs(trace: Trace) -> list[Req]:
    """Fresh Reqs in real tokens; a compact prompt stays compact (and so do its rows).

    >>> from radix.traces.base import TraceRequest
    >>> t = Trace("request", [TraceRequest("a", 0, (5, 6), 1)])
    >>> [r.origin_input_ids for r in trace_reqs(t)]
    [[5, 6]]
    """
    reqs = []
    for tr in trace.requests:
        compact = is_compact(tr.token_ids)
        prompt = tr.token_ids if compact else list(tr.token_ids)
        req = Req(tr.rid, prompt, max_new_tokens=tr.output_len, extra_key=tr.extra_key,
                  cache_salt=tr.cache_salt, priority=tr.priority, arrival=tr.arrival)
        if compact:
            req.output_ids, req.slot_ids = RunList(), RunList()
        reqs.append(req)
    return reqs


def output_tokens(trace: Trace, index: int) -> Sequence[int]:
    """The reply of request `index`: the trace's own when recorded, else unique synthetic ids.

    >>> from radix.traces.base import TraceRequest
    >>> t = Trace("request", [TraceRequest("a", 0, (5,), 3)])
    >>> output_tokens(t, 0) == range(OUTPUT_BASE, OUTPUT_BASE + 3)
    True
    """
    tr = trace.requests[index]
    if tr.output_ids:
        return list(tr.output_ids[:tr.output_len])
    if is_compact(tr.token_ids):
        return TokenRuns([(COMPACT_OUTPUT_BASE + (index << 21), tr.output_len)])
    start = OUTPUT_BASE + (index << 20)
    return range(start, start + tr.output_len)

