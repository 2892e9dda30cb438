"""The Scheduler page's runs: one sort of a waiting queue, and the cold burst through the loop.

The sort: a warm tree (the customer-support S + F, four users' histories, S alone) and a waiting
queue cycling through six kinds of request, from long cached matches to a cold 2,000-token
document shared by several waiting requests. `SchedulePolicy.calc_priority` sorts it once; its
events (QueueSorted, RequestRanked, PolicyFellBack) give the order before and after, each
request's capped match, the in-batch check and why a request went to the back. The same warm
requests also ran through vLLM's block cache, so the page shows both caches the sort read.
The burst: `Scheduler` with `SimRunner` (the cost model) on examples.workloads.cold_burst, read
per prefill round from its StepReports and first QueueSorted. LPM's in-batch check
deprioritizes 63 of 64, but admission still walks the queue until the round's input budget is
spent, so SGLang's default 16,384 admits 8 requests that all prefill the prefix.
Leaves out: decode rounds (counted, not listed).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from examples.workloads import FEW_SHOT_LEN, SYSTEM_LEN, Tokens, cold_burst
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockPoolSnapshot
from radix.events import ListSink, PolicyFellBack, QueueSorted, RequestRanked
from radix.request import Req, SlotAllocator
from radix.runs.costs import CostModel
from radix.runs.sim import SimClock, SimRunner
from radix.sched.policy import SchedulePolicy, request_key
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.traces.trace import to_req
from radix.tree.radix_cache import RadixCache
from radix.tree.snapshot import TreeSnapshot

POLICIES = ("lpm", "dfs-weight", "fcfs", "lof", "random")
FALLBACK_LEN = 128  # SGLang: LPM runs FCFS when more requests wait than this
HISTORY_LENS = (120, 260, 400, 610)  # four users' cached conversation histories
DOC_LEN = 2_000  # the cold document several waiting requests share
SHORT_SHARE = 20  # a cold 20-token prefix: under the default deprioritize threshold of 32
# Arrival pattern of kinds, repeated to the queue size.
PATTERN = ("cold doc", "warm S", "cold unique", "warm history", "cold doc", "cold short",
           "warm S+F", "cold doc", "cold short", "warm history", "cold unique", "cold doc")


class QueueRow(NamedTuple):
    rid: str
    kind: str  # one of PATTERN's kinds
    before: int  # place in the queue before the sort (0 = first offered to admission)
    after: int
    prefix_len: int  # cached match capped at len - 1 (measured after the sort for agnostic ones)
    in_batch_len: int | None  # match in this round's waiting-queue tree; None: not checked
    deprioritized: bool
    reason: str  # the policy's words, or "" when the policy does not look at the cache
    max_new_tokens: int


class QueueSort(NamedTuple):
    policy: str  # as chosen
    active_policy: str  # what ran (fcfs after the fallback)
    notice: str | None  # the PolicyFellBack notice
    rows: list[QueueRow]  # in arrival order
    tree: TreeSnapshot  # the warm tree the sort matched against (after its matches)
    blocks: BlockPoolSnapshot  # vLLM's pool after the same warm requests finished
    prompts: dict[str, list[int]]  # rid -> prompt token ids


def check_queue_params(policy: str, n: int, check_threshold: int, deprioritize: int) -> None:
    """Raises ValueError naming the field."""
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if not 1 <= n <= 1_000:
        raise ValueError(f"queue size: {n} is not in 1..1,000")
    if not -1 <= check_threshold <= 100_000:
        raise ValueError(f"check_threshold: {check_threshold} is not in -1..100,000")
    if not 0 <= deprioritize <= 100_000:
        raise ValueError(f"deprioritize_threshold: {deprioritize} is not in 0..100,000")


class DemoState(NamedTuple):
    tree: RadixCache  # the warm tree
    queue: list[Req]  # the waiting requests q000, q001, ... in arrival order
    kinds: dict[str, str]  # rid -> kind (PATTERN)
    warm: list[list[int]]  # the prompts that warmed the tree, in order


def demo_state(n: int, seed: int = 0) -> DemoState:
    """The warm tree, n waiting requests and rid -> kind.

    Matches: warm history 2,055 + 120/260/400/610; warm S+F 2,055; warm S 512; cold ones 0.
    """
    t, rng = Tokens(seed), random.Random(seed + 1)
    s, f = t.take(SYSTEM_LEN), t.take(FEW_SHOT_LEN)
    doc, short = t.take(DOC_LEN), t.take(SHORT_SHARE)
    hist = [t.take(n_h) for n_h in HISTORY_LENS]
    tree = RadixCache()
    # the last one used S alone: S ends in a node of its own
    warm = [s + f + h for h in hist] + [s + t.take(50)]
    for prompt in warm:
        tree.insert(prompt)
    prompts = {"warm history": lambda i: s + f + hist[i % len(hist)] + t.take(40),
               "warm S+F": lambda i: s + f + t.take(60), "warm S": lambda i: s + t.take(300),
               "cold doc": lambda i: doc + t.take(30), "cold short": lambda i: short + t.take(200),
               "cold unique": lambda i: t.take(300)}
    queue, kinds, seen = [], {}, dict.fromkeys(prompts, 0)
    for i in range(n):
        kind = PATTERN[i % len(PATTERN)]
        rid = f"q{i:03d}"
        seen[kind] += 1
        queue.append(Req(rid, prompts[kind](seen[kind] - 1),
                         max_new_tokens=rng.choice((16, 64, 128, 256, 512, 1024)),
                         arrival=i * 0.01))
        kinds[rid] = kind
    return DemoState(tree, queue, kinds, warm)


def warm_blocks(warm: list[list[int]]) -> BlockPoolSnapshot:
    """vLLM's block pool after the warm requests ran one after another and finished (room
    for all of them, so nothing is evicted)."""
    num_blocks = sum(-(-len(p) // 16) for p in warm) + 1
    m = BlockCacheManager(BlockPool(num_blocks, 16))
    for i, prompt in enumerate(warm):
        req = Req(f"warm-{i}", prompt)
        hit = m.get_computed_blocks(req)
        m.allocate_slots(req, len(prompt) - hit.num_computed_tokens, hit)
        m.free(req)
    return m.snapshot()


def sort_queue(policy: str = "lpm", n: int = 24, check_threshold: int = 32,
               deprioritize_threshold: int = 32, seed: int = 0) -> QueueSort:
    """One `calc_priority` over the demo queue, with the policy's own events.

    LPM, 24 waiting, default thresholds: the 4 warm-history requests first (2,665 .. 2,175),
    then 2 S+F (2,055), 2 S (512), then cold ones in arrival order; of the 8 cold-doc requests
    the first enters the waiting-queue tree and the other 7 share 2,000 >= 32 tokens with it:
    deprioritized, last. Cold-short ones share 20 < 32: not deprioritized.
    """
    check_queue_params(policy, n, check_threshold, deprioritize_threshold)
    tree, queue, kinds, warm = demo_state(n, seed)
    sink = ListSink()
    sp = SchedulePolicy(policy, tree, check_threshold=check_threshold,
                        deprioritize_threshold=deprioritize_threshold,
                        fcfs_fallback_len=FALLBACK_LEN, seed=seed, sink=sink)
    before = [r.rid for r in queue]
    sp.calc_priority(queue)
    ranked = {e.rid: e for e in sink.events if isinstance(e, RequestRanked)}
    sorted_ev = next(e for e in sink.events if isinstance(e, QueueSorted))
    fell = next((e for e in sink.events if isinstance(e, PolicyFellBack)), None)
    after = {rid: i for i, rid in enumerate(sorted_ev.order_after)}
    rows = []
    for i, req in enumerate(sorted(queue, key=lambda r: before.index(r.rid))):
        ev = ranked.get(req.rid)
        if ev is None:  # the policy did not look: measure (the sort is over)
            key = request_key(req)
            plen = min(tree.match_prefix(key).prefix_len, max(len(key) - 1, 0))
            rows.append(QueueRow(req.rid, kinds[req.rid], i, after[req.rid], plen, None, False,
                                 "", req.max_new_tokens))
        else:
            rows.append(QueueRow(req.rid, kinds[req.rid], i, after[req.rid], ev.prefix_len,
                                 ev.in_batch_len, ev.deprioritized, ev.reason,
                                 req.max_new_tokens))
    return QueueSort(policy, sorted_ev.active_policy, fell.notice if fell else None, rows,
                     tree.snapshot(), warm_blocks(warm),
                     {r.rid: list(r.origin_input_ids) for r in queue})


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
