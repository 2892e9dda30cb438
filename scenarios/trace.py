"""The Trace debugger's run: any trace replayed through both caches, indexed for scrubbing.

Request and Mooncake traces go through SGLang's per-request flow (`radix.runs.compare.run_tree`:
match capped at input_len - 1, lock, allocate with eviction, finish) into an EventLog checked
after every request, and through vLLM's (`run_blocks`) into block keyframes (blockframes.py);
requests are expanded one at a time, and the log keeps token ids and slots compact (`compact`:
as TokenRuns where they come in runs, else as `array('q')`, 8 bytes a token, not ~36 as a tuple
of ints), so a 4,000-request Mooncake trace (~50 M logged tokens) fits a session's memory budget
(runtime/budget.py: the app passes its ledger and upload limits in). An index built from the
typed events answers "where was request X admitted, finished, evicted". A KV-events recording
is folded as `radix watch --read` folds it (scenarios/kvrecording.py). Op logs run op by op
(radix.runs.ops): one that fails keeps the tree of its last good step, the failing op and the
rule it broke.
This module is the app's only user of radix.runs.compare. Leaves out: batching (Scheduler page).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from radix import events as ev
from radix.blocks.hashing import VLLM_NONE_HASH_SEED, BlockHasher
from radix.runs.compare import fewer_collections, run_tree
from radix.runs.ops import OpRunner
from radix.tokens import TokenRuns
from radix.traces.base import load_trace
from radix.traces.limits import DEFAULT_LIMITS, TraceLimits
from radix.traces.ops import OpTraceError
from radix.traces.trace import Trace, output_tokens, to_req
from radix.tree.invariants import InvariantError
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog
from runtime.budget import set_aside_heap
from scenarios.blockframes import BlockFrames
from scenarios.kvrecording import RecordingFold, fold_recording

Progress = Callable[[float, str], None]  # (fraction done, what runs now)
EVENT_BYTES = 120  # an event object, its tuple of ids and its place in a step list
NODE_BYTES = 400  # a node record in a keyframe of the tree
CHECK_EVERY_OP_UP_TO = 5_000  # longer op logs are checked every CHECK_EVERY ops and at the end
CHECK_EVERY = 64
# request traces: invariants after every request up to this many, else after every
# ceil(n / CHECKS_PER_TRACE)-th and the last (a full check walks the whole tree: after each of
# 12,031 conversation requests it was 44% of the replay; 1,000 checks were 1.7 of its 14 CPU-s,
# 250 are ~0.45). A request trace only drives RadixLens's own run_tree, so a failed check is a
# bug of ours, not of the trace; op logs, which a user writes, keep CHECK_EVERY.
CHECK_EVERY_REQUEST_UP_TO = 2_000
CHECKS_PER_TRACE = 250
# the log's keyframes (a copy of the tree each): every 64 steps up to CHECK_EVERY_REQUEST_UP_TO
# requests, every LONG_KEYFRAME_EVERY past it, where the tree is large (675 copies of the 12k
# conversation stand-in's tree were 1.3 CPU-s; a scrub replays at most this many steps)
LONG_KEYFRAME_EVERY = 256


class Cancelled(Exception):
    """The user cancelled the replay."""


class Ledger(Protocol):
    """Where a replay holds its memory: the server's `Budget` (runtime/budget.py; `reserve`
    raises BudgetError to refuse), passed by the app. A replay without one holds nothing."""

    def reserve(self, session_id: str, what: str, nbytes: int) -> None: ...
    def release(self, session_id: str, what: str | None = None) -> None: ...


# The log's NodeInserted (token ids, slots) and NodeEvicted (slots) are kept compact: Mooncake's
# tokens come in runs (block u: u*512 .. u*512+511) and the slot allocators hand out runs too.
RUN_BYTES = 80  # a TokenRuns run: a start and an end, each a list slot and an int object


def compact(values: Sequence[int]) -> Sequence[int]:
    """`TokenRuns` when the values form fewer than len / 4 runs, else `array('q')` (numpy finds
    the runs: a Python loop over 50 M tokens would cost a minute). Values past int64 (compact
    traces' synthetic replies) are kept as runs either way.

    >>> type(compact(range(100))).__name__, type(compact([3, 1, 2])).__name__
    ('TokenRuns', 'array')
    """
    if isinstance(values, TokenRuns):  # a RunList (mutable) is frozen into a TokenRuns
        return values if type(values) is TokenRuns else TokenRuns(values.runs())
    if isinstance(values, array):
        return values
    try:
        a = np.asarray(values, dtype=np.int64)
    except OverflowError:
        return TokenRuns.from_ids(values)
    breaks = np.flatnonzero(np.diff(a) != 1) + 1
    if (len(breaks) + 1) * 4 > len(a):
        return array("q", a.tobytes())
    firsts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(a)]))
    return TokenRuns(zip(a[firsts].tolist(), (ends - firsts).tolist(), strict=True))


def nbytes(values: Sequence[int]) -> int:
    """Bytes a compacted sequence keeps: ~80 per run, 8 per array item, ~36 per tuple item.

    >>> nbytes(compact(range(1000))), nbytes(compact([3, 1, 2]))
    (80, 24)
    """
    if isinstance(values, TokenRuns):
        return RUN_BYTES * values.num_runs
    if isinstance(values, array):
        return values.itemsize * len(values)
    return 36 * len(values)


class CompactLog(EventLog):
    """An EventLog whose NodeInserted and NodeEvicted events keep compact sequences; `nbytes`
    estimates what it holds."""

    def __init__(self, keyframe_every: int = 64, page_size: int = 1) -> None:
        super().__init__(keyframe_every, page_size)  # its TreeModel keeps them as they are
        self.payload = 0
        self.num_events = 0

    def emit(self, event: ev.Event) -> None:
        # the events rebuilt field by field (dataclasses.replace costs ~10x as much)
        kind = type(event)
        if kind is ev.NodeInserted:
            e = event
            event = ev.NodeInserted(e.node_id, e.parent_id, compact(e.token_ids),
                                    compact(e.slot_ids), e.priority, e.time, e.extra_key,
                                    e.cache_salt)
            self.payload += nbytes(event.token_ids) + nbytes(event.slot_ids)
        elif kind is ev.NodeEvicted:
            e = event
            event = ev.NodeEvicted(e.node_id, e.parent_id, e.num_tokens, compact(e.slot_ids),
                                   e.sort_key)
            self.payload += nbytes(event.slot_ids)
        self.num_events += 1
        super().emit(event)

    @property
    def nbytes(self) -> int:
        kept = sum(len(k.nodes) for k in self._keyframes)
        return self.payload + EVENT_BYTES * self.num_events + NODE_BYTES * (
            kept + len(self.model.nodes))


class Rejection(NamedTuple):
    rid: str
    cache: str  # "radix tree" or "block cache"
    reason: str


class Found(NamedTuple):
    """A step of the log where something happened to a request."""

    what: str  # "looked up", "admitted", "finished", "rejected", "evicted (leaf #12)"
    step: int  # the log step it happened in (the tree after it: step + 1)


class OpFailure(NamedTuple):
    line: int  # the failing op's line in the file
    op: str  # its name ("unlock", ...)
    error: str  # what the cache said
    rule: str  # the rule the op broke, in words
    last_good_step: int  # log steps done before it: the tree to show


RULES = {  # words in an op error -> the rule it breaks
    "holds no lock": "dec_lock_ref may only release a lock inc_lock_ref took: lock_ref counts "
                     "the running requests at or below a node, so it never goes below 0 (a "
                     "double unlock would make a node in use look evictable)",
    "no running request": "a request op names a request that is not running: start it first",
    "out of KV slots": "the pool has no slot left and nothing evictable: every cached token is "
                       "locked by a running request",
    "already running": "request ids are unique while running: finish the first one",
    "has not finished its prefill": "decode comes after the whole prompt has slots (extend)",
}


@dataclasses.dataclass
class TraceReplay:
    name: str  # the file name, as uploaded
    digest: str  # blake2b of the bytes: uploads are cached by content
    trace: Trace
    capacity: int
    page_size: int
    block_size: int
    log: EventLog | None  # the tree's steps (None for a KV-events recording)
    stats: dict[str, dict] | None = None  # {"tree": ..., "blocks": ...} run_tree/run_blocks
    rejections: list[Rejection] = dataclasses.field(default_factory=list)
    first_bad_step: int | None = None  # first log step after which check_invariants failed
    violation: str | None = None
    failure: OpFailure | None = None  # an op log that stopped on an error
    index: dict[str, list[Found]] = dataclasses.field(default_factory=dict)
    ends: list[int] = dataclasses.field(default_factory=list)  # last step of each request
    matches: dict[str, int] = dataclasses.field(default_factory=dict)  # rid -> tree match
    blocks: BlockFrames | None = None
    op_counts: dict[str, int] | None = None  # op logs: ops by name
    checked_every: int = 1  # invariants checked after every this many ops (op logs) or
    #                         requests (request traces), and after the last
    nbytes: int = 0  # what the replay holds (estimate)
    hasher: BlockHasher = dataclasses.field(default_factory=BlockHasher)  # block hashing
    recording: RecordingFold | None = None  # a KV-events recording, folded as radix watch does

    def requests_done(self, step: int) -> int:
        """Requests whose every step is among the first `step` steps of the log.

        Steps ending at [3, 6]: 0 done after 3 steps, 1 after 4, 2 after 7."""
        return bisect.bisect_left(self.ends, step)


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _feed(trace: Trace, start: int, stop: int) -> Iterator[tuple[Any, list[int]]]:
    """Fresh Reqs (in real tokens: `to_req`, as trace_reqs makes them) and outputs for requests
    start..stop-1, one at a time."""
    for i in range(start, stop):
        yield to_req(trace.requests[i]), output_tokens(trace, i)


def replay(data: bytes, name: str, capacity: int = 1_000_000, page_size: int = 1,
           block_size: int = 16, *, limits: TraceLimits = DEFAULT_LIMITS, session_id: str = "-",
           budget: Ledger | None = None, progress: Progress | None = None,
           cancel: threading.Event | None = None, hash_algo: str = "radixlens",
           hash_seed: str = VLLM_NONE_HASH_SEED) -> TraceReplay:
    """Loads `data` (any format, within `limits`; TraceError names line and field) and replays
    it. With a `budget` (the app passes the server's: runtime/budget.py's BUDGET and
    server_limits()) its memory is held there under (session_id, "trace replay"), BudgetError
    when it would not fit; without one nothing is held. The block cache hashes blocks as
    `hash_algo` (with vLLM's seed `hash_seed`) does.

    Two requests of one output token each log 1 + 2 x 3 = 7 steps: reset, then per request
    match_prefix, inc_lock_ref and cache_finished_req (its insert and unlock inside one step).
    """
    if capacity < 1 or page_size < 1 or block_size < 1:
        raise ValueError("capacity, page size and block size must be >= 1")
    trace = load_trace(data, limits=limits)
    out = TraceReplay(name, digest(data), trace, capacity, page_size, block_size, None,
                      hasher=BlockHasher(hash_algo, hash_seed))
    if trace.format == "kv_events":
        out.recording = fold_recording(data, trace)
        return out
    what = "trace replay"

    def hold(nbytes: int) -> None:  # what the replay holds so far (refused past the budget)
        if budget is not None:
            budget.reserve(session_id, what, nbytes)

    try:
        if trace.format == "ops":
            hold(64 * len(data))
            with fewer_collections():
                return _replay_ops(out, progress, cancel)
        tokens = sum(trace.input_lens) + sum(r.output_len for r in trace.requests)
        live = 2 * 36 * min(capacity, tokens)  # the tree's own lists at most
        hold(live)
        with fewer_collections():
            _replay_requests(out, hold, live, progress, cancel)
        out.nbytes = live + out.log.nbytes + out.blocks.nbytes
        hold(out.nbytes)
        if len(trace.requests) > CHECK_EVERY_REQUEST_UP_TO:
            set_aside_heap()  # a big replay, kept for the session: out of the collector's way
        return out
    except BaseException:
        if budget is not None:
            budget.release(session_id, what)  # nothing of it is kept
        raise


def _replay_requests(out: TraceReplay, hold: Callable[[int], None], live: int,
                     progress: Progress | None, cancel: threading.Event | None) -> None:
    trace, n = out.trace, len(out.trace.requests)
    log = out.log = CompactLog(64 if n <= CHECK_EVERY_REQUEST_UP_TO else LONG_KEYFRAME_EVERY,
                               out.page_size)
    # the block keyframes at their most, held before the tree runs: a pool they would not fit
    # is refused before any of it is built
    usable = sum(trace.input_lens) + sum(r.output_len + out.block_size for r in trace.requests)
    capacity = min(out.capacity, usable)
    live += BlockFrames.max_nbytes(n, capacity, out.block_size)
    hold(live)

    def tree_feed() -> Iterator[tuple[Any, list[int]]]:
        for i, item in enumerate(_feed(trace, 0, n)):
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled")
            if i % 64 == 0:
                hold(live + log.nbytes)
                if progress is not None:
                    progress(0.6 * i / max(n, 1), f"radix tree: request {i:,} of {n:,}")
            yield item

    outputs: list[list[int]] = []

    def reqs() -> Iterator[Any]:
        for req, o in tree_feed():
            outputs.append(o)
            yield req

    def outs() -> Iterator[list[int]]:
        for i in range(n):
            yield outputs[i]
            outputs[i] = []

    every = out.checked_every = (1 if n <= CHECK_EVERY_REQUEST_UP_TO
                                 else -(-n // CHECKS_PER_TRACE))
    done = 0

    def check(tree: RadixCache) -> None:
        nonlocal done
        done += 1
        if done % every == 0 or done == n:
            tree.check_invariants()

    try:
        tree = run_tree(reqs(), outs(), out.capacity, out.page_size, sink=log,
                        after_request=check)
    except InvariantError as exc:
        out.first_bad_step, out.violation = log.num_steps - 1, str(exc)
        tree = None

    def block_progress(i: int) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        if progress is not None:
            progress(0.6 + 0.4 * i / max(n, 1), f"block cache: request {i:,} of {n:,}")

    out.blocks = BlockFrames(n, lambda a, b: _feed(trace, a, b), capacity, out.block_size,
                             progress=block_progress, hash_algo=out.hasher)
    out.stats = {"tree": tree, "blocks": out.blocks.stats}
    _index(out)
    rejected = {rid for rid, found in out.index.items() if any(f.what == "rejected" for f in found)}
    for i, r in enumerate(trace.requests):
        if r.rid in rejected:
            out.rejections.append(Rejection(r.rid, "radix tree", (
                f"its {trace.input_lens[i]:,}-token prompt found no room in the "
                f"{out.capacity:,}-slot pool even after evicting every evictable leaf")))
    blocks = out.blocks.num_blocks - 1
    for rid in out.blocks.rejected:
        i = next(j for j, r in enumerate(trace.requests) if r.rid == rid)
        need = -(-trace.input_lens[i] // out.block_size)
        out.rejections.append(Rejection(rid, "block cache", (
            f"its prompt needs {need:,} blocks of {out.block_size}; the pool has {blocks:,}, "
            "and running requests hold the rest")))
    if progress is not None:
        progress(1.0, "done")


# a request's steps in SGLang's flow (run_tree), in order: its lookup, its lock, then its end
LIFECYCLE = ("looked up", "admitted", "ended")


def _request_step(events: list[ev.Event], stage: int) -> str:
    """What a request's step did, from its typed events and its place (`stage`) in LIFECYCLE. A
    lookup (PrefixMatched; none for an empty key) and a lock (LockChanged +1; none at the root)
    may hold no event, so their place tells them. The end is "finished" when it holds the
    insert's HitCounted (emitted even when nothing is new), else "rejected" (an unlock)."""
    if stage < 2:
        return LIFECYCLE[stage]
    return "finished" if any(isinstance(e, ev.HitCounted) for e in events) else "rejected"


def _index(out: TraceReplay) -> None:
    """One pass over the log's typed events: each request's steps, the last step of each, its
    tree match (the PrefixMatched of its lookup; a finish re-matches too, which is not it)."""
    log, owners, last, stage = out.log, {}, {}, {}
    index: dict[str, list[Found]] = {}
    for step in range(log.num_steps):
        events = log.events_of(step)
        rid = events[0].rid
        what = None
        if rid is not None:
            last[rid] = step
            at = stage.get(rid, 0)
            what = _request_step(events, at)
            stage[rid] = (at + 1) % len(LIFECYCLE)
            index.setdefault(rid, []).append(Found(what, step))
        for e in events:
            if isinstance(e, ev.NodeInserted) and rid is not None:
                owners[e.node_id] = rid
            elif isinstance(e, ev.NodeSplit) and e.node_id in owners:
                owners[e.new_node_id] = owners[e.node_id]
            elif isinstance(e, ev.NodeEvicted) and e.node_id in owners:
                index.setdefault(owners.pop(e.node_id), []).append(
                    Found(f"evicted (leaf #{e.node_id}, {e.num_tokens:,} token"
                          f"{'' if e.num_tokens == 1 else 's'})", step))
            elif isinstance(e, ev.PrefixMatched) and what == "looked up" and rid:
                out.matches[rid] = e.prefix_len
    out.index, out.ends = index, sorted(last.values())


def search(out: TraceReplay, rid: str) -> list[Found]:
    """The steps where request `rid` was looked up, admitted, finished, rejected or evicted
    (exact id first; else every id that contains it, at most 20 ids)."""
    if rid in out.index:
        return out.index[rid]
    hits = [r for r in out.index if rid and rid in r][:20]
    return [Found(f"{r}: {f.what}", f.step) for r in hits for f in out.index[r]]


def _replay_ops(out: TraceReplay, progress: Progress | None,
                cancel: threading.Event | None) -> TraceReplay:
    ops = out.trace.ops
    log = out.log = EventLog(page_size=ops.page_size)
    runner = OpRunner(ops, sink=log)
    n = len(ops.ops)
    every = 1 if n <= CHECK_EVERY_OP_UP_TO else CHECK_EVERY
    out.checked_every = every
    out.op_counts = dict(Counter(op.op for op in ops.ops))
    for i, op in enumerate(ops.ops):
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        if progress is not None and i % 256 == 0:
            progress(i / max(n, 1), f"op {i:,} of {n:,}")
        good = log.num_steps
        try:
            runner.run(op)
        except OpTraceError as exc:
            text = str(exc)
            rule = next((r for k, r in RULES.items() if k in text), text)
            out.failure = OpFailure(op.line, op.op, text, rule, good)
            break
        if out.first_bad_step is None and (i % every == every - 1 or i == n - 1):
            try:
                runner.cache.check_invariants()
            except InvariantError as exc:
                out.first_bad_step = log.num_steps - 1
                out.violation = f"after the op on line {op.line}: {exc}"
    out.nbytes = 64 * sum(len(s) for s in log.steps)
    if progress is not None:
        progress(1.0, "done")
    return out
