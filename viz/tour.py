"""The Tour: DESIGN.md's three-request walk (R1, R2, R3) as an event log, and its numbers.

Each request goes through SGLang's flow one call at a time: `match_prefix` (which splits the node
a match ends inside), `inc_lock_ref` on the matched node (the lock walks to the root), `insert`
of the whole prompt (a new leaf for the uncached part), `dec_lock_ref` when it finishes. Costs
are derived for Llama-3-8B on an H100 with engine/costs.py, and labelled so.
vLLM's block cache takes the same requests (BlockCacheManager, 16-token blocks): lookup beside
the match, touch of the hits beside the lock, allocate + cache beside the insert, free beside the
unlock; one block snapshot per step. Leaves out: decode tokens (output_len is 1).
"""

from __future__ import annotations

from typing import NamedTuple

from examples.workloads import three_requests
from radix import events as ev
from radix.blocks.manager import BlockCacheManager, LookupRecord
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.runs.costs import CostModel
from radix.tree.eventlog import EventLog
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache
from viz.blocks_chain import lookup_line

OPS_PER_REQUEST = 4  # match_prefix, inc_lock_ref, insert, dec_lock_ref
BLOCK_SIZE = 16  # vLLM's default
# The capacity of both caches: the walk's 6,910 prompt tokens stored apart, in whole blocks,
# ceil(6,910 / 16) = 432 blocks = 6,912 tokens. Neither evicts: the tree (unbounded here) peaks
# at 4,343 tokens, the pool at 271 cached blocks + 1 partial.
CAPACITY_TOKENS = 6_912


class TourRun(NamedTuple):
    log: EventLog
    rids: list[str]  # in arrival order
    prompt_lens: list[int]
    insert_steps: list[int]  # log step index of each request's insert
    blocks: list = []  # BlockPoolSnapshot after each number of log steps (0..num_steps)
    lookups: list = []  # (log step, LookupRecord) of each request's block lookup
    prompts: list = []  # each request's prompt token ids


class TourNumbers(NamedTuple):
    stored: int  # tokens the tree holds
    apart: int  # tokens the requests inserted so far would need stored separately
    saved: int  # apart - stored
    saved_mib: float  # KV bytes of the saved tokens, MiB (Llama-3-8B, derived)
    saved_prefill_ms: float  # H100 prefill time of the saved tokens, ms (derived)
    evictable: int
    protected: int


def run_tour(seed: int = 0) -> TourRun:
    """Plays the walk: a reset step, then 4 steps per request (13), logged with a keyframe
    every 4 steps; the block cache takes one call per tree step (13 + 1 block snapshots)."""
    log = EventLog(keyframe_every=OPS_PER_REQUEST)
    cache = RadixCache(sink=log)
    manager = BlockCacheManager(BlockPool(CAPACITY_TOKENS // BLOCK_SIZE + 1, BLOCK_SIZE))
    blocks = [manager.snapshot()] * (log.num_steps + 1)  # the reset step changes no block
    rids, lens, inserts, lookups, prompts = [], [], [], [], []
    for tr in three_requests(seed):
        key, req = RadixKey(list(tr.token_ids)), Req(tr.rid, list(tr.token_ids))
        m = cache.match_prefix(key, rid=tr.rid)
        hit = manager.get_computed_blocks(req)
        lookups.append((log.num_steps - 1, manager.lookups[-1]))
        blocks.append(manager.snapshot())
        cache.inc_lock_ref(m.last_node, rid=tr.rid)
        manager.allocate_slots(req, 0, hit)  # touch the hits: the lock of the block cache
        blocks.append(manager.snapshot())
        inserts.append(log.num_steps)
        cache.insert(key, rid=tr.rid)
        manager.allocate_slots(req, len(req.origin_input_ids) - hit.num_computed_tokens)
        blocks.append(manager.snapshot())
        cache.dec_lock_ref(m.last_node, rid=tr.rid)
        manager.free(req)
        blocks.append(manager.snapshot())
        rids.append(tr.rid)
        lens.append(len(tr.token_ids))
        prompts.append(list(tr.token_ids))
    cache.check_invariants()
    manager.check_invariants()
    return TourRun(log, rids, lens, inserts, blocks, lookups, prompts)


def block_index(step: int, k: int, num_steps: int) -> int:
    """The block snapshot for the frame (step, k): a block call is one atomic change, shown
    from the first micro-event of the tree step it stands beside."""
    return min(step + (1 if k > 0 else 0), num_steps)


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


class CacheCounters(NamedTuple):
    looked_up: int  # prompt tokens of the requests looked up so far
    hit: int  # of those, tokens reused from the cache
    hit_rate: float  # hit / looked_up (0.0 before the first lookup)
    cached: int  # tokens the cache holds
    evictable: int  # cached tokens no running request holds
    protected: int  # cached tokens a running request holds (lock_ref / ref_cnt > 0)


def _counters(looked_up: int, hit: int, cached: int, evictable: int, protected: int):
    return CacheCounters(looked_up, hit, hit / looked_up if looked_up else 0.0, cached,
                         evictable, protected)


def tree_counters(run: TourRun, snapshot, step: int, k: int) -> CacheCounters:
    """The tree's counters at (step, k), hits summed over the PrefixMatched events of the steps
    played, a step counting from its first micro-event (k > 0), as `block_index` does: so both
    caches count a request's lookup at the same frame, its match step's first event.

    At "step 5, event 1" (R2's split, before its PrefixMatched): 2,055 of 2,151 + 2,135 =
    4,286, beside the blocks' 2,048 of 4,286. At the end: hit 0 + 2,055 + 512 = 2,567 of
    6,910 looked up: 37.1%; cached 4,343."""
    played = min(step + (1 if k > 0 else 0), run.log.num_steps)
    matched = [e for s in range(played) for e in run.log.micro_events(s)
               if isinstance(e, ev.PrefixMatched)]
    return _counters(sum(e.key_len for e in matched), sum(e.prefix_len for e in matched),
                     snapshot.total_size, snapshot.evictable_size, snapshot.protected_size)


def block_counters(run: TourRun, step: int, k: int) -> CacheCounters:
    """The block cache's counters at (step, k), from the lookups done and the block snapshot.

    At the end: hit 0 + 128 x 16 + 32 x 16 = 2,560 of 6,910: 37.0%. Cached: full blocks only,
    R1 2,151 // 16 = 134, R2 133 - 128 hit = 5, R3 164 - 32 hit = 132: 271 x 16 = 4,336.
    """
    i = block_index(step, k, run.log.num_steps)
    done = [rec for s, rec in run.lookups if s < i]
    hashed = [b for b in run.blocks[i].blocks if b.hash is not None]
    free = sum(1 for b in hashed if b.ref_cnt == 0)
    bs = run.blocks[i].block_size
    return _counters(sum(r.num_tokens for r in done), sum(r.hit_tokens for r in done),
                     len(hashed) * bs, free * bs, (len(hashed) - free) * bs)


def lookup_of(run: TourRun, rid: str, step: int, k: int) -> LookupRecord | None:
    """The block lookup of `rid` if it has happened by (step, k)."""
    i = block_index(step, k, run.log.num_steps)
    return next((rec for s, rec in run.lookups if s < i and rec.rid == rid), None)


def rid_at(run: TourRun, step: int) -> str:
    """The request a step belongs to (its match .. its unlock); R1 at the reset, R3 at the end."""
    return next((rid for rid, s in zip(run.rids, run.insert_steps) if step <= s + 1),
                run.rids[-1])


def lookup_text(run: TourRun, rid: str, step: int, k: int) -> str:
    """Where `rid`'s block lookup stopped and why, beside the tree's match, at (step, k)."""
    rec = lookup_of(run, rid, step, k)
    if rec is None:
        return f"{rid} has not been looked up yet."
    i = run.rids.index(rid)
    match = next(e for e in run.log.micro_events(run.insert_steps[i] - 2)
                 if isinstance(e, ev.PrefixMatched))
    return lookup_line(rec, run.blocks[0].block_size, match.prefix_len)


def counter_table(tree: CacheCounters, blocks: CacheCounters) -> dict[str, list[str]]:
    """Both caches' counters as table columns (strings, formatted for the page)."""
    rows = [("hit tokens", lambda c: f"{c.hit:,} of {c.looked_up:,}"),
            ("hit rate", lambda c: f"{c.hit_rate:.1%}"),
            ("cached tokens", lambda c: f"{c.cached:,}"),
            ("evictable tokens", lambda c: f"{c.evictable:,}"),
            ("protected tokens", lambda c: f"{c.protected:,}")]
    return {"": [r[0] for r in rows], "radix tree": [f(tree) for _, f in rows],
            "block cache (16-token blocks)": [f(blocks) for _, f in rows]}


def split_frame(run: TourRun, timeline) -> tuple[int, int]:
    """The cursor of the first split of the walk (R2's match leaving R1 at token 2,055)."""
    for step in range(run.log.num_steps):
        for i, e in enumerate(run.log.micro_events(step)):
            if isinstance(e, ev.NodeSplit):
                return step, i + 1
    raise LookupError("the walk has no split")
