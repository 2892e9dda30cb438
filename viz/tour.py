"""The Tour: DESIGN.md's three-request walk (R1, R2, R3) as an event log, and its numbers.

Each request goes through SGLang's flow one call at a time: `match_prefix` (which splits the node
a match ends inside), `inc_lock_ref` on the matched node (the lock walks to the root), `insert`
of the whole prompt (a new leaf for the uncached part), `dec_lock_ref` when it finishes. Costs
are derived for Llama-3-8B on an H100 with engine/costs.py, and labelled so.
Leaves out: decode tokens (output_len is 1, so the tree stores exactly the prompts).
"""

from __future__ import annotations

from typing import NamedTuple

from engine.costs import CostModel
from examples.workloads import three_requests
from radix.eventlog import EventLog
from radix.key import RadixKey
from radix.tree import RadixCache

OPS_PER_REQUEST = 4  # match_prefix, inc_lock_ref, insert, dec_lock_ref


class TourRun(NamedTuple):
    log: EventLog
    rids: list[str]  # in arrival order
    prompt_lens: list[int]
    insert_steps: list[int]  # log step index of each request's insert


class TourNumbers(NamedTuple):
    stored: int  # tokens the tree holds
    apart: int  # tokens the requests inserted so far would need stored separately
    saved: int  # apart - stored
    saved_mib: float  # KV bytes of the saved tokens, MiB (Llama-3-8B, derived)
    saved_prefill_ms: float  # H100 prefill time of the saved tokens, ms (derived)
    evictable: int
    protected: int


def run_tour(seed: int = 0) -> TourRun:
    """Plays the walk; 12 steps (4 per request), logged with a keyframe every 4 steps."""
    log = EventLog(keyframe_every=OPS_PER_REQUEST)
    cache = RadixCache(sink=log)
    rids, lens, inserts = [], [], []
    for tr in three_requests(seed):
        key = RadixKey(list(tr.token_ids))
        m = cache.match_prefix(key, rid=tr.rid)
        cache.inc_lock_ref(m.last_node, rid=tr.rid)
        inserts.append(log.num_steps)
        cache.insert(key, rid=tr.rid)
        cache.dec_lock_ref(m.last_node, rid=tr.rid)
        rids.append(tr.rid)
        lens.append(len(tr.token_ids))
    cache.check_invariants()
    return TourRun(log, rids, lens, inserts)


def tour_numbers(run: TourRun, snapshot, step: int, k: int, cost: CostModel | None = None):
    """Numbers for the frame (step, k): a request counts as stored apart once its insert has
    grown its leaf (its insert step is done, or is the current step with k > 0).

    At the end: apart = 2,151 + 2,135 + 2,624 = 6,910; stored 4,343; saved 2,567 tokens
    = 2,567 x 131,072 B = 320.9 MiB, and 2,567 / 22,036 tok/s = 116.5 ms of prefill.
    """
    cost = cost or CostModel()
    apart = sum(n for n, s in zip(run.prompt_lens, run.insert_steps) if s < step or
                (s == step and k > 0))
    stored = snapshot.total_size
    saved = apart - stored
    return TourNumbers(stored, apart, saved, cost.kv_bytes(saved) / 2**20,
                       1000 * cost.prefill_seconds(saved), snapshot.evictable_size,
                       snapshot.protected_size)


def split_frame(run: TourRun, timeline) -> tuple[int, int]:
    """The cursor of the first split of the walk (R2's match leaving R1 at token 2,055)."""
    from radix import events as ev

    for step in range(run.log.num_steps):
        for i, e in enumerate(run.log.micro_events(step)):
            if isinstance(e, ev.NodeSplit):
                return step, i + 1
    raise LookupError("the walk has no split")
