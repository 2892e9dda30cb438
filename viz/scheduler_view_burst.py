"""The cold burst through the real scheduler loop: 64 requests, one cold 2,000-token prefix.

Runs engine/scheduler.py's `Scheduler` with `SimRunner` (the cost model, no model) on
examples.workloads.cold_burst, and reads each prefill round from its StepReports and the first
QueueSorted event. The nuance it shows: LPM's in-batch check deprioritizes 63 of the 64, but
deprioritizing only reorders the queue; admission then walks it until the round's input budget
is spent, so SGLang's default 16,384 still admits 8 requests that all prefill the prefix.
Leaves out: decode rounds (counted, not listed) and the block cache.
"""

from __future__ import annotations

from typing import NamedTuple

from examples.workloads import cold_burst
from radix.allocator import SlotAllocator
from radix.events import ListSink, QueueSorted
from radix.runs.costs import CostModel
from radix.runs.sim import SimClock, SimRunner
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.traces.base import to_req
from radix.tree.radix_cache import RadixCache

NUM_REQUESTS = 64
PREFIX_LEN = 2_000
SUFFIX_LEN = 16
NO_BUDGET = 10**9  # larger than the burst: every request fits in round one
# (label, schedule policy, max_prefill_tokens)
CASES = (
    ("FCFS, no budget", "fcfs", NO_BUDGET),
    ("one request per round (budget 2,016)", "fcfs", PREFIX_LEN + SUFFIX_LEN),
    ("LPM, SGLang's default budget 16,384", "lpm", 16_384),
)


class BurstRound(NamedTuple):
    round: int  # 1-based prefill round
    num_requests: int
    rids: str  # "burst-00 .. burst-07"
    prefix_prefilled: int  # tokens of the shared prefix computed this round
    prefix_reused: int  # tokens of the shared prefix read from the tree
    tokens_prefilled: int  # all tokens computed (prefix + suffixes)
    seconds: float  # priced by the cost model (derived)


class BurstRun(NamedTuple):
    label: str
    policy: str
    budget: int  # max_prefill_tokens
    rounds: list[BurstRound]  # prefill rounds only
    num_decode_steps: int
    deprioritized_first_round: int  # sent to the back by the in-batch check in round one
    admitted_deprioritized: int  # of those, admitted in round one anyway
    prefix_prefilled: int
    tokens_prefilled: int
    prefill_seconds: float  # derived

    @property
    def duplicates(self) -> int:
        """Requests that prefilled the prefix beyond the one that had to."""
        return sum(r.prefix_prefilled for r in self.rounds) // PREFIX_LEN - 1


def _span(rids: list[str]) -> str:
    return rids[0] if len(rids) == 1 else f"{rids[0]} .. {rids[-1]}"


def run_burst(policy: str, budget: int, label: str = "", cost: CostModel | None = None,
              seed: int = 0) -> BurstRun:
    """All 64 arrive at t = 0; the loop runs to completion.

    FCFS, no budget: round one admits 64, nothing cached: 64 x 2,000 = 128,000 prefix tokens
    (129,024 with the suffixes). Budget 2,016: round one admits burst-00 alone and prefills the
    prefix once (2,000); round two admits the other 63, which hit it and prefill 16 each.
    LPM + 16,384: round one admits 2,016 x 8 = 16,128 (the 9th needs 2,016 >= 256 left):
    8 x 2,000 = 16,000 prefix tokens, 7 duplicates; round two: 56 x 16.
    """
    if budget < 1:
        raise ValueError(f"budget: {budget} is not >= 1")
    cost = cost or CostModel()
    reqs = [to_req(tr) for tr in cold_burst(NUM_REQUESTS, PREFIX_LEN, SUFFIX_LEN, seed)]
    # subtle: room for everything twice over, so memory never limits admission (only the budget)
    alloc = SlotAllocator(2 * sum(len(r.origin_input_ids) + r.max_new_tokens for r in reqs))
    clock, sink = SimClock(), ListSink()
    sched = Scheduler(SimRunner(cost, clock), RadixCache(allocator=alloc), alloc,
                      SchedulerConfig(policy=policy, max_prefill_tokens=budget, seed=seed),
                      clock=clock, sink=sink)
    for r in reqs:
        sched.add_request(r)
    reports = sched.run_to_completion()
    rounds = []
    for rep in (r for r in reports if r.kind == "prefill"):
        done = sum(PREFIX_LEN - min(p, PREFIX_LEN) for p in rep.prefix_lens)
        reused = sum(min(p, PREFIX_LEN) for p in rep.prefix_lens)
        rounds.append(BurstRound(len(rounds) + 1, len(rep.rids), _span(rep.rids), done, reused,
                                 sum(rep.extend_lens), rep.seconds))
    first = next(e for e in sink.events if isinstance(e, QueueSorted))
    admitted = set(reports[0].rids)
    prefilled = sum(r.tokens_prefilled for r in rounds)
    return BurstRun(label or f"{policy}, budget {budget:,}", policy, budget, rounds,
                    sum(r.kind == "decode" for r in reports), len(first.deprioritized),
                    len(admitted & set(first.deprioritized)),
                    sum(r.prefix_prefilled for r in rounds), prefilled,
                    cost.prefill_seconds(prefilled))


def burst_cases() -> list[BurstRun]:
    """The three runs of DESIGN.md's cold burst, in CASES order."""
    return [run_burst(policy, budget, label) for label, policy, budget in CASES]
