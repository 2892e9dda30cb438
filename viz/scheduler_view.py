"""The scheduler page's waiting queue: one sort by a schedule policy, with what it saw and did.

A warm tree (the customer-support S + F, four users' histories, S alone) and a waiting queue that
cycles through six kinds of request, from long cached matches to a cold 2,000-token document
shared by several waiting requests. `SchedulePolicy.calc_priority` sorts it once; its events
(QueueSorted, RequestRanked, PolicyFellBack) give the order before and after, each request's
capped match, the in-batch check and why a request was sent to the back.
Leaves out: admission (viz/scheduler_view_burst.py runs the whole loop).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from examples.workloads import FEW_SHOT_LEN, SYSTEM_LEN, Tokens
from radix.events import ListSink, PolicyFellBack, QueueSorted, RequestRanked
from radix.request import Req
from radix.sched.policy import SchedulePolicy, request_key
from radix.tree.radix_cache import RadixCache

POLICIES = ("lpm", "dfs-weight", "fcfs", "lof", "random")
FALLBACK_LEN = 128  # SGLang: LPM runs FCFS when more requests wait than this
HISTORY_LENS = (120, 260, 400, 610)  # four users' cached conversation histories
DOC_LEN = 2_000  # the cold document several waiting requests share
SHORT_SHARE = 20  # a cold 20-token prefix: under the default deprioritize threshold of 32
# Arrival pattern of kinds, repeated to the queue size.
PATTERN = ("cold doc", "warm S", "cold unique", "warm history", "cold doc", "cold short",
           "warm S+F", "cold doc", "cold short", "warm history", "cold unique", "cold doc")
KIND_MATCH = {"warm history": "S + F + history", "warm S+F": "S + F (2,055)",
              "warm S": "S (512)", "cold doc": "0", "cold short": "0", "cold unique": "0"}


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


def demo_state(n: int, seed: int = 0) -> tuple[RadixCache, list[Req], dict[str, str]]:
    """The warm tree, n waiting requests (q000, q001, ...) and rid -> kind.

    Matches: warm history 2,055 + 120/260/400/610; warm S+F 2,055; warm S 512; cold ones 0.
    """
    t, rng = Tokens(seed), random.Random(seed + 1)
    s, f = t.take(SYSTEM_LEN), t.take(FEW_SHOT_LEN)
    doc, short = t.take(DOC_LEN), t.take(SHORT_SHARE)
    hist = [t.take(n_h) for n_h in HISTORY_LENS]
    tree = RadixCache()
    for h in hist:
        tree.insert(s + f + h)
    tree.insert(s + t.take(50))  # a request that used S alone: S ends in a node of its own
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
    return tree, queue, kinds


def sort_queue(policy: str = "lpm", n: int = 24, check_threshold: int = 32,
               deprioritize_threshold: int = 32, seed: int = 0) -> QueueSort:
    """One `calc_priority` over the demo queue, with the policy's own events.

    LPM, 24 waiting, default thresholds: the 4 warm-history requests first (2,665 .. 2,175),
    then 2 S+F (2,055), 2 S (512), then cold ones in arrival order; of the 8 cold-doc requests
    the first enters the waiting-queue tree and the other 7 share 2,000 >= 32 tokens with it:
    deprioritized, last. Cold-short ones share 20 < 32: not deprioritized.
    """
    check_queue_params(policy, n, check_threshold, deprioritize_threshold)
    tree, queue, kinds = demo_state(n, seed)
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
    return QueueSort(policy, sorted_ev.active_policy, fell.notice if fell else None, rows)
