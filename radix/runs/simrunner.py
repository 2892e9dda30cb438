"""The simulator's clock and its priced runner: a `Runner` that computes nothing.

`SimRunner` prices each forward by the cost model (radix/runs/costs.py: Llama-3-8B on an H100,
derived, not measured), advances a simulated clock and emits each request's reply token by
token; `decode_span` prices a run of decode steps one by one in a loop of float additions, for
the scheduler's fast-forward (radix/sched/span.py). Leaves out: real models (engine/).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from radix.request import Req
from radix.runs.costs import CostModel
from radix.sched.scheduler import StepOutput
from radix.tokens import TokenRuns

OUTPUT_TOKEN_BASE = 1 << 31  # generated tokens lie above every trace token id


class SimClock:
    """Simulated seconds; the runner advances it by each forward's priced time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SimRunner:
    """A `Runner` that computes nothing: it prices the step and emits the request's reply,
    token by token (`outputs`: rid -> its reply, e.g. radix.traces.trace.output_tokens), or a
    distinct fake token for a request it has no reply for.

    >>> clock = SimClock(); r = Req("a", list(range(2000)), max_new_tokens=2)
    >>> r.fill_ids = r.all_ids; out = SimRunner(CostModel(), clock).extend([r], [0])
    >>> round(out.seconds, 4), out.next_token_ids[0] >= OUTPUT_TOKEN_BASE  # 2,000 / 22,036
    (0.0908, True)
    """

    def __init__(self, cost: CostModel, clock: SimClock,
                 outputs: Mapping[str, Sequence[int]] | None = None) -> None:
        self.cost, self.clock = cost, clock
        self.outputs = outputs or {}
        # a reply that is one run of ids (synthetic, compact): its first id, to skip a lookup
        self._first = {rid: o[0] for rid, o in self.outputs.items() if len(o) and (
            isinstance(o, TokenRuns) and o.num_runs == 1 or isinstance(o, range) and o.step == 1)}

    def extend(self, reqs: list[Req], prefix_lens: list[int]) -> StepOutput:
        tokens = sum(len(r.fill_ids) - p for r, p in zip(reqs, prefix_lens))
        seconds = self.cost.prefill_seconds(tokens)
        self.clock.now += seconds
        return StepOutput([self._token(r) if len(r.fill_ids) >= len(r.all_ids) else None
                           for r in reqs], seconds)

    def decode(self, reqs: list[Req]) -> StepOutput:
        seconds = self.cost.decode_seconds(sum(len(r.slot_ids) for r in reqs))
        self.clock.now += seconds
        return StepOutput([self._token(r) for r in reqs], seconds)

    def decode_span(self, reqs: list[Req], max_steps: int, until: float,
                    context: int | None = None) -> int:
        """Prices up to `max_steps` decode steps (each adds a slot to every row, then reads
        them all, as `decode` does), adding each step's seconds to the clock in turn; stops
        after the first step that ends at or past `until`. Returns the steps priced.
        `context`: the slots the rows hold now, when the caller keeps the count (the rows may
        lag: radix/sched/ledger.py)."""
        n = len(reqs)
        if context is None:
            context = sum(len(r.slot_ids) for r in reqs)
        now, steps = self.clock.now, 0
        while steps < max_steps:
            context += n
            now += self.cost.decode_seconds(context)
            steps += 1
            if now >= until:
                break
        self.clock.now = now
        return steps

    def span_tokens(self, req: Req, num: int) -> Sequence[int]:
        """The next `num` tokens of `req`'s reply (a range when the reply is one run)."""
        done = len(req.output_ids)
        first = self._first.get(req.rid)
        if first is not None and done + num <= req.max_new_tokens:
            return range(first + done, first + done + num)
        out = self.outputs.get(req.rid)
        if out is not None and done + num <= len(out):
            return out[done:done + num]
        return [self._token(req, done + j) for j in range(num)]

    def _token(self, req: Req, index: int | None = None) -> int:
        index = len(req.output_ids) if index is None else index
        first = self._first.get(req.rid)
        if first is not None and index < req.max_new_tokens:
            return first + index
        out = self.outputs.get(req.rid)
        if out is not None and index < len(out):
            return out[index]
        return OUTPUT_TOKEN_BASE + (zlib.crc32(req.rid.encode()) % 65536) * 32768 + (
            index % 32768)
