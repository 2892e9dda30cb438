"""Running an op trace (radix/traces/ops.py) on a RadixCache, with a result per op.

Raw ops call the cache directly; with no allocator (no capacity, no request op) an insert
without a value stores its token ids as values, as SGLang's tests do. Request ops go the way
SGLang 0.5.23's scheduler goes: start = match_prefix of all tokens but the last (one is always
computed, for its logits) + inc_lock_ref; extend = slots for the next prompt tokens (evicting the
shortfall); decode = a slot for the previous token, then the new token; unfinished / finished =
cache_unfinished_req / cache_finished_req (0.5.23's checkpoint / release_kv_cache). A runtime
error (a lock on a node that is gone, no slots left) is an OpTraceError naming line and field.
Checking: `replay_ops` runs check_invariants once every `nodes` ops (a check walks every node,
so checking costs about one node visit per op) and after the last; a failed check is narrowed
down to the first op after which the invariants fail, by replaying again. Leaves out: batching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from radix.events import EventSink
from radix.request import Req, SlotAllocator
from radix.traces.ops import Op, OpTrace, OpTraceError
from radix.tree.invariants import InvariantError
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

UNBOUNDED = 2**40
CHECK_OPS_PER_NODE = 1  # default cadence: one full check (it walks every node) per this many
# ops per node, so the checks cost about one node visit per op and a replay stays linear
NARROW_POINTS = 16  # checks per pass when narrowing a failed window down to its first bad op
# the field a runtime error is blamed on, per op (see OpRunner.run)
BLAME = {"insert": "tokens", "match": "tokens", "lock": "node", "unlock": "node",
         "evict": "num_tokens", "start": "rid", "extend": "num_tokens", "decode": "rid",
         "unfinished": "rid", "finished": "rid"}


@dataclass
class ReplayResult:
    cache: RadixCache
    results: list[dict[str, Any]] = field(default_factory=list)  # one per op
    first_bad_line: int | None = None  # first op after which check_invariants failed
    violation: str | None = None
    first_bad_index: int | None = None  # that op's index in trace.ops
    num_checks: int = 0  # full check_invariants runs (narrowing a failure excluded)


def _key(args: dict) -> RadixKey:
    return RadixKey(args["tokens"], args.get("extra_key"), args.get("cache_salt"))


class OpRunner:
    def __init__(self, trace: OpTrace, sink: EventSink | None = None) -> None:
        needs_slots = trace.capacity is not None or any(
            op.op in ("start", "extend", "decode") for op in trace.ops
        )
        self.allocator = SlotAllocator(trace.capacity or UNBOUNDED) if needs_slots else None
        self.cache = RadixCache(trace.page_size, trace.policy, trace.policy_config,
                                sink=sink, allocator=self.allocator)
        self.reqs: dict[str, Req] = {}

    def run(self, op: Op) -> dict[str, Any]:
        """Runs one op; a runtime error is an OpTraceError naming the op's line and field."""
        try:
            out = getattr(self, "_" + op.op)(op.args)
        except OpTraceError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            name = BLAME[op.op]
            if (name not in op.args and "rid" in op.args) or "request" in str(text):
                name = "rid"
            elif op.op == "lock" and "tokens" in op.args:
                name = "tokens"
            raise OpTraceError(f'op "{op.op}": {text}', op.line, name) from None
        c = self.cache
        out.update(op=op.op, line=op.line, evictable_size=c.evictable_size(),
                   protected_size=c.protected_size(), total_size=c.total_size())
        return out

    # raw ops
    def _insert(self, a: dict) -> dict:
        key, value = _key(a), a.get("value")
        fresh = value is None and self.allocator is not None
        if fresh:
            value = self._alloc(len(key))
        r = self.cache.insert(key, value, a.get("priority", 0), a.get("chunked", False))
        if fresh:  # a caller that computed the whole key frees its duplicates
            self.allocator.free(value[: r.prefix_len])
            aligned = len(key) // self.cache.page_size * self.cache.page_size
            self.allocator.free(value[aligned:])
        return {"prefix_len": r.prefix_len, "last_node": r.last_node.id}

    def _match(self, a: dict) -> dict:
        r = self.cache.match_prefix(_key(a))
        return {"prefix_len": r.prefix_len, "last_node": r.last_node.id}

    def _node(self, node_id: int):
        try:
            return self.cache.node(node_id)
        except KeyError:
            raise KeyError(f"no live node {node_id} (never created, or evicted)") from None

    def _lock(self, a: dict) -> dict:
        node = self._node(a["node"]) if "node" in a else self.cache.match_prefix(
            _key(a)).last_node
        return {"node": node.id, "delta": self.cache.inc_lock_ref(node)}

    def _unlock(self, a: dict) -> dict:
        return {"node": a["node"], "delta": self.cache.dec_lock_ref(self._node(a["node"]))}

    def _evict(self, a: dict) -> dict:
        r = self.cache.evict(a["num_tokens"])
        return {"num_evicted": r.num_evicted, "evicted": [
            {"node": n.id, "key": list(n.key.token_ids)} for n in r.evicted_nodes]}

    # request ops
    def _alloc(self, n: int) -> list[int]:
        slots = self.allocator.alloc(n)
        if slots is None:
            self.cache.evict(n - self.allocator.available_size())
            slots = self.allocator.alloc(n)
        if slots is None:
            raise ValueError(f"out of KV slots: need {n}, {self.allocator.available_size()} free "
                             "and nothing left to evict")
        return slots

    def _req(self, rid: str) -> Req:
        if rid not in self.reqs:
            raise KeyError(f"no running request {rid!r}")
        return self.reqs[rid]

    def _start(self, a: dict) -> dict:
        if a["rid"] in self.reqs:
            raise ValueError(f"request {a['rid']!r} is already running")
        req = Req(a["rid"], list(a["tokens"]), extra_key=a.get("extra_key"),
                  cache_salt=a.get("cache_salt"), priority=a.get("priority", 0))
        # SGLang matches all but the last token: it is always computed, for its logits
        key = RadixKey(a["tokens"][: len(a["tokens"]) - 1], a.get("extra_key"),
                       a.get("cache_salt"))
        m = self.cache.match_prefix(key, rid=req.rid)
        req.prefix_indices, req.cache_protected_len = list(m.slot_ids), m.prefix_len
        req.slot_ids, req.fill_ids = list(m.slot_ids), req.origin_input_ids[: m.prefix_len]
        req.last_node = m.last_node
        self.cache.inc_lock_ref(m.last_node, rid=req.rid)
        self.reqs[req.rid] = req
        return {"rid": req.rid, "prefix_len": m.prefix_len, "last_node": m.last_node.id}

    def _extend(self, a: dict) -> dict:
        req = self._req(a["rid"])
        left = max(0, len(req.origin_input_ids) - len(req.slot_ids))
        n = a.get("num_tokens", left)
        if not 0 <= n <= left:
            raise ValueError(f"num_tokens {n} is outside 0..{left} (prompt tokens left)")
        req.slot_ids += self._alloc(n)
        req.fill_ids = req.origin_input_ids[: len(req.slot_ids)]
        return {"rid": req.rid, "computed": len(req.slot_ids)}

    def _decode(self, a: dict) -> dict:
        req = self._req(a["rid"])
        if len(req.slot_ids) < len(req.origin_input_ids):
            raise ValueError(f"request {req.rid!r} has not finished its prefill")
        if req.output_ids:
            req.slot_ids += self._alloc(1)  # KV of the previous token
        req.output_ids.append(a["token"])
        return {"rid": req.rid, "num_output": len(req.output_ids)}

    def _unfinished(self, a: dict) -> dict:
        req = self._req(a["rid"])
        chunked = a.get("chunked", len(req.fill_ids) < len(req.origin_input_ids))
        self.cache.cache_unfinished_req(req, chunked=chunked)
        return {"rid": req.rid, "cache_protected_len": req.cache_protected_len}

    def _finished(self, a: dict) -> dict:
        req = self._req(a["rid"])
        self.cache.cache_finished_req(req, is_insert=a.get("is_insert", True))
        del self.reqs[req.rid]
        return {"rid": req.rid}


def replay_ops(trace: OpTrace, sink: EventSink | None = None, check: bool = True,
               check_every: int | None = None) -> ReplayResult:
    """Runs every op. With check=True, check_invariants runs after every `check_every` ops
    (None: every `nodes` x CHECK_OPS_PER_NODE ops, so every op while the tree is just the root)
    and after the last; the first failure is narrowed down to its op (`first_bad_line`).

    subtle: a break that heals itself before the next check is not seen (check_every=1 sees
    every op); narrowing assumes a break lasts until the check that found it.

    >>> from radix.traces.ops import parse_ops
    >>> t = parse_ops('{"op": "insert", "tokens": [1, 2, 3]}\\n{"op": "match", "tokens": [1, 2]}')
    >>> out = replay_ops(t)
    >>> [r["prefix_len"] for r in out.results], out.num_checks
    ([0, 2], 2)
    """
    runner = OpRunner(trace, sink)
    out = ReplayResult(runner.cache)
    last, good, due = len(trace.ops) - 1, -1, 1  # good: index after which the checks passed
    for i, op in enumerate(trace.ops):
        out.results.append(runner.run(op))
        due -= 1
        if not check or out.first_bad_index is not None or (due > 0 and i < last):
            continue
        out.num_checks += 1
        problem = _problem(runner.cache)
        if problem is None:
            good, due = i, check_every or max(1, _num_nodes(runner.cache) * CHECK_OPS_PER_NODE)
            continue
        out.first_bad_index, out.violation = _narrow(trace, good, i, problem)
        out.first_bad_line = trace.ops[out.first_bad_index].line
    return out


def _num_nodes(cache: RadixCache) -> int:
    return len(cache._nodes)  # O(1); what one check_invariants walks (RadixCache has no count)


def _problem(cache: RadixCache) -> str | None:
    try:
        cache.check_invariants()
    except InvariantError as exc:
        return str(exc)
    return None


def _narrow(trace: OpTrace, good: int, bad: int, violation: str) -> tuple[int, str]:
    """The first op index in (good, bad] after which the invariants fail, and the failure.

    Each pass replays the trace afresh (no sink) up to `good`, then checks NARROW_POINTS evenly
    spaced ops of the window: the window shrinks NARROW_POINTS-fold a pass. A window of W ops
    takes log16(W) passes, each about one replay without checks plus 16 checks: only a broken
    cache pays this (minutes for a failure late in a 1 M-op trace).
    """
    while bad - good > 1:
        runner = OpRunner(trace)
        for op in islice(trace.ops, good + 1):
            runner.run(op)
        step, i = -(-(bad - good) // NARROW_POINTS), good
        while i + step < bad:
            for op in islice(trace.ops, i + 1, i + step + 1):
                runner.run(op)
            i += step
            problem = _problem(runner.cache)
            if problem is not None:
                bad, violation = i, problem
                break
            good = i
    return bad, violation
