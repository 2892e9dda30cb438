"""A loaded trace: `Trace` and its `TraceRequest`s, and the `Req` each becomes for a run.

Every loader returns a Trace (radix/traces/base.py's `load_trace` picks the loader); a request
is in the trace's token unit (`Trace.token_scale`: 512 real tokens a Mooncake hash id, kept as
runs, radix/tokens/), its reply synthetic unless the trace recorded one (`output_tokens`).
Leaves out: sampling parameters; reading and writing (requests.py and the format modules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from radix.request import Req
from radix.tokens import RunList, TokenRuns, Tokens, is_compact

FORMATS = ("request", "mooncake", "kv_events", "ops")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace, in the trace's token unit (see `Trace.token_scale`)."""

    rid: str  # request id, unique in the trace
    arrival: float  # seconds since the trace's start
    token_ids: Tokens  # the prompt (a list, or TokenRuns for a compact trace: radix/tokens/),
    # shared with the Req, the tree and its events: never mutated
    output_len: int  # tokens to generate (always real tokens)
    extra_key: str | None = None  # namespace (LoRA id etc.): different keys never share cache
    cache_salt: str | None = None  # per-tenant salt; also a namespace
    priority: int = 0  # larger is more important
    output_ids: tuple[int, ...] | None = None  # the reply a simulated run generates (recorded
    # conversations: so the next turn's prompt, which contains it, can hit the cached reply)

    __hash__ = None  # type: ignore[assignment]  # compared, never hashed: token_ids is a list


@dataclass
class Trace:
    """A loaded trace. `requests` are in arrival order (stable for equal arrivals)."""

    format: str  # one of FORMATS
    requests: list[TraceRequest] = field(default_factory=list)
    token_scale: int = 1  # real tokens per unit token: 1, or 512 for a Mooncake block-unit trace
    input_lens: list[int] = field(default_factory=list)  # real prompt length of each request
    batches: list[Any] = field(default_factory=list)  # kv_events: decoded EventBatch objects
    ops: Any = None  # ops: whatever radix.traces.ops.load_ops returned
    source: str = "<bytes>"  # the file name, for messages


OUTPUT_BASE = 1 << 40  # synthetic output tokens: OUTPUT_BASE + (request index << 20) + j
COMPACT_OUTPUT_BASE = 1 << 63  # for compact traces, above every Mooncake token (< 2**63)


def to_req(tr: TraceRequest) -> Req:
    """A fresh `Req` for the schedulers and caches, in real tokens, over the trace's own prompt
    (`Tokens`, no copy): a compact prompt (TokenRuns, Mooncake) stays compact, and so do its rows
    (output_ids, slot_ids are RunLists).

    >>> tr = TraceRequest("r1", 0.5, [1, 2, 3], 4); to_req(tr).origin_input_ids is tr.token_ids
    True
    """
    compact = is_compact(tr.token_ids)
    req = Req(tr.rid, tr.token_ids,
              max_new_tokens=tr.output_len, extra_key=tr.extra_key, cache_salt=tr.cache_salt,
              priority=tr.priority, arrival=tr.arrival)
    if compact:
        req.output_ids, req.slot_ids = RunList(), RunList()
    return req


def trace_reqs(trace: Trace) -> list[Req]:
    """Fresh Reqs for every request of the trace (`to_req`): what compare.py, sim.py and
    explain.py feed the caches, so that all three see the same tokens.

    >>> t = Trace("request", [TraceRequest("a", 0, [5, 6], 1)])
    >>> [r.origin_input_ids for r in trace_reqs(t)]
    [[5, 6]]
    """
    return [to_req(tr) for tr in trace.requests]


def is_compact_trace(trace: Trace) -> bool:
    """True when the trace's prompts are TokenRuns (Mooncake), so rows must stay compact."""
    return bool(trace.requests) and is_compact(trace.requests[0].token_ids)


def output_tokens(trace: Trace, index: int) -> Sequence[int]:
    """The reply of request `index`: the trace's own when recorded, else distinct synthetic ids
    no prompt uses: a `range` for plain traces, one TokenRuns run for compact ones, never a list
    built up front.

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
