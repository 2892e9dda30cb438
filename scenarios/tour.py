"""The Tour's walks: a few requests through SGLang's flow, one call at a time, beside vLLM's blocks.

Each request goes through what SGLang's scheduler does: `match_prefix` of the prompt less its
last token (SGLang matches at most input_len - 1 tokens: the last one is always computed, for its
logits; a match that ends inside an edge splits it), `inc_lock_ref` on the matched node (the lock
walks hop by hop to the root), `insert` of what the finished request caches, (prompt + output)
less the last output token, whose KV was never computed, with KV slots from a SlotAllocator (the
tree's values are slots, not token ids), and `dec_lock_ref`. vLLM's BlockCacheManager (16-token
blocks) takes the same requests: lookup beside the match, touch beside the lock, allocate + cache
beside the insert, free beside the unlock; one block snapshot per step.
Walks: DESIGN.md's three requests; a multi-turn chat whose fifth turn locks five nodes; a
repeated prompt. Leaves out: batching (one request at a time) and eviction (nothing fills up).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from examples.workloads import multi_turn, three_requests
from radix.blocks.manager import BlockCacheManager, LookupRecord
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockPoolSnapshot
from radix.request import Req, SlotAllocator
from radix.runs.costs import CostModel
from radix.traces.trace import TraceRequest
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog
from radix.tree.snapshot import TreeSnapshot

OPS_PER_REQUEST = 4  # match_prefix, inc_lock_ref, insert, dec_lock_ref
BLOCK_SIZE = 16  # vLLM's default


class Walk(NamedTuple):
    title: str  # the page's headline
    about: str  # one line: what to watch


WALKS = {
    "three-requests": Walk(
        "Tour: three requests share a prefix",
        "R1 = S+F+96 tokens, R2 = S+F+80, R3 = S+2,112 (S: 512-token system prompt, F: 1,543-token "
        "few-shot block). Watch R2's match split R1's leaf at token 2,055."),
    "multi-turn": Walk(
        "Tour: a conversation locks its whole path",
        "One user's five turns under a shared 512-token S (another user's first turn splits S "
        "off). Each turn's prompt is the last turn's prompt + reply + a new message, so the path "
        "grows a node per turn; turn 5's lock walks 5 hops to the root and back."),
    "repeat": Walk(
        "Tour: the same prompt twice",
        "R1 = S+F+96 (2,151 tokens), then R1 again. SGLang matches at most input_len - 1 = 2,150 "
        "tokens, so the repeat's match ends one token before the end of R1's leaf and splits it."),
}


def walk_requests(name: str, seed: int = 0) -> list[TraceRequest]:
    """The requests of a walk, in arrival order.

    multi-turn: u000's five turns and u001's first (it arrives 1 s after u000's first and
    splits S off): prompts 712, 712, 1,312, 2,550, 4,300, 4,720 tokens.
    """
    if name == "three-requests":
        return three_requests(seed)
    if name == "multi-turn":
        return [r for r in multi_turn(2, seed) if r.rid.startswith("u000") or r.rid == "u001-t1"]
    if name == "repeat":
        r1 = three_requests(seed)[0]
        return [r1, dataclasses.replace(r1, rid="R1-again", arrival=1.0)]
    raise ValueError(f"walk: {name!r} is not one of {', '.join(WALKS)}")


class TourRun(NamedTuple):
    name: str  # a key of WALKS
    log: EventLog
    rids: list[str]  # in arrival order
    prompts: list[list[int]]  # each request's prompt token ids
    stored: list[int]  # tokens each request caches: len((prompt + output)[:-1])
    match_steps: list[int]  # log step index of each request's match_prefix
    insert_steps: list[int]  # log step index of each request's insert
    blocks: list[BlockPoolSnapshot]  # the block pool after each number of log steps
    lookups: list[tuple[int, LookupRecord]]  # (log step, record) of each request's lookup
    capacity: int  # tokens, both caches
    flavor: str = "unified"  # the tree's flavor (radix/tree/unified.py: split_times)

    @property
    def prompt_lens(self) -> list[int]:
        return [len(p) for p in self.prompts]


def _capacity(reqs: list[TraceRequest]) -> int:
    """Room for every request stored apart, in whole blocks (neither cache evicts). The three
    requests: ceil(6,910 / 16) = 432 blocks = 6,912 tokens."""
    total = sum(len(r.token_ids) + r.output_len - 1 for r in reqs)
    return -(-total // BLOCK_SIZE) * BLOCK_SIZE


def run_tour(name: str = "three-requests", seed: int = 0) -> TourRun:
    """Plays a walk: a reset step, then 4 steps per request, logged with a keyframe every 4
    steps; the block cache takes one call per tree step."""
    reqs = walk_requests(name, seed)
    capacity = _capacity(reqs)
    log = EventLog(keyframe_every=OPS_PER_REQUEST)
    slots = SlotAllocator(capacity)
    cache = RadixCache(sink=log, allocator=slots)
    manager = BlockCacheManager(BlockPool(capacity // BLOCK_SIZE + 1, BLOCK_SIZE))
    blocks = [manager.snapshot()] * (log.num_steps + 1)  # the reset step changes no block
    rids, prompts, stored, matches, inserts, lookups = [], [], [], [], [], []
    for tr in reqs:
        prompt = list(tr.token_ids)
        output = list(tr.output_ids) if tr.output_ids else [0] * tr.output_len
        keep = (prompt + output)[:-1]  # the last output token's KV was never computed
        req = Req(tr.rid, prompt)
        matches.append(log.num_steps)
        m = cache.match_prefix(RadixKey(prompt[:-1]), rid=tr.rid)  # input_len - 1
        hit = manager.get_computed_blocks(req)
        lookups.append((log.num_steps - 1, manager.lookups[-1]))
        blocks.append(manager.snapshot())
        cache.inc_lock_ref(m.last_node, rid=tr.rid)
        manager.allocate_slots(req, 0, hit)  # touch the hits: the lock of the block cache
        blocks.append(manager.snapshot())
        inserts.append(log.num_steps)
        value = list(m.slot_ids) + slots.alloc(len(keep) - m.prefix_len)
        done = cache.insert(RadixKey(keep), value, rid=tr.rid)
        slots.free(value[m.prefix_len:done.prefix_len])  # duplicates of cached tokens
        manager.allocate_slots(req, len(prompt) - hit.num_computed_tokens)
        req.output_ids = output[:-1]
        manager.allocate_slots(req, len(req.output_ids))
        blocks.append(manager.snapshot())
        cache.dec_lock_ref(m.last_node, rid=tr.rid)
        manager.free(req)
        blocks.append(manager.snapshot())
        rids.append(tr.rid)
        prompts.append(prompt)
        stored.append(len(keep))
    cache.check_invariants()
    manager.check_invariants()
    return TourRun(name, log, rids, prompts, stored, matches, inserts, blocks, lookups, capacity,
                   cache.flavor)


def block_index(step: int, k: int, num_steps: int) -> int:
    """The block snapshot for the frame (step, k): a block call is one atomic change, shown
    from the first micro-event of the tree step it stands beside."""
    return min(step + (1 if k > 0 else 0), num_steps)


def _played(step: int, k: int, at: int) -> bool:
    """Whether log step `at` has started by the frame (step, k)."""
    return at < step or (at == step and k > 0)


class TourNumbers(NamedTuple):
    stored: int  # tokens the tree holds
    apart: int  # tokens the requests cached so far would need stored separately
    saved: int  # apart - stored
    saved_mib: float  # KV bytes of the saved tokens, MiB (Llama-3-8B, derived)
    saved_prefill_ms: float  # H100 prefill time of the saved tokens, ms (derived)


def tour_numbers(run: TourRun, snapshot: TreeSnapshot, step: int, k: int,
                 cost: CostModel | None = None) -> TourNumbers:
    """A request counts as stored apart once its insert has started by (step, k).

    Three requests at the end: apart = 2,151 + 2,135 + 2,624 = 6,910; stored 4,343; saved
    2,567 tokens = 2,567 x 131,072 B = 320.9 MiB, and 2,567 / 22,036 tok/s = 116.5 ms.
    """
    cost = cost or CostModel()
    apart = sum(n for n, s in zip(run.stored, run.insert_steps) if _played(step, k, s))
    saved = apart - snapshot.total_size
    return TourNumbers(snapshot.total_size, apart, saved, cost.kv_bytes(saved) / 2**20,
                       1000 * cost.prefill_seconds(saved))


class CacheCounters(NamedTuple):
    looked_up: int  # prompt tokens of the requests looked up so far
    hit: int  # of those, tokens reused from the cache
    hit_rate: float  # hit / looked_up (0.0 before the first lookup)
    cached: int  # tokens the cache holds
    evictable: int  # cached tokens no running request holds
    protected: int  # cached tokens a running request holds (lock_ref / ref_cnt > 0)


def _counters(looked_up: int, hit: int, cached: int, evictable: int,
              protected: int) -> CacheCounters:
    return CacheCounters(looked_up, hit, hit / looked_up if looked_up else 0.0, cached,
                         evictable, protected)


def tree_counters(run: TourRun, snapshot: TreeSnapshot, step: int, k: int) -> CacheCounters:
    """The tree's counters at (step, k): a request counts from its match step's first event,
    as `block_index` counts the block lookup beside it, so both caches count it at one frame.

    Three requests, "step 5, event 1" (R2's split): 2,055 of 2,151 + 2,135 = 4,286 (the match
    of R1 found nothing). At the end: 0 + 2,055 + 512 = 2,567 of 6,910: 37.1%; cached 4,343."""
    played = [i for i, s in enumerate(run.match_steps) if _played(step, k, s)]
    return _counters(sum(len(run.prompts[i]) for i in played),
                     sum(matched_len(run, i) for i in played), snapshot.total_size,
                     snapshot.evictable_size, snapshot.protected_size)


def matched_len(run: TourRun, i: int) -> int:
    """Tokens request i's match_prefix returned (its PrefixMatched event)."""
    for e in run.log.micro_events(run.match_steps[i]):
        if type(e).__name__ == "PrefixMatched":
            return e.prefix_len
    return 0


def block_counters(run: TourRun, step: int, k: int) -> CacheCounters:
    """The block cache's counters at (step, k), from the lookups done and the block snapshot.

    Three requests at the end: hit 0 + 128 x 16 + 32 x 16 = 2,560 of 6,910: 37.0%. Cached:
    full blocks only, R1 2,151 // 16 = 134, R2 133 - 128 hit = 5, R3 164 - 32 hit = 132:
    271 x 16 = 4,336.
    """
    i = block_index(step, k, run.log.num_steps)
    done = [rec for s, rec in run.lookups if s < i]
    snap = run.blocks[i]
    hashed = [b for b in snap.blocks if b.hash is not None]
    free = sum(1 for b in hashed if b.ref_cnt == 0)
    bs = snap.block_size
    return _counters(sum(r.num_tokens for r in done), sum(r.hit_tokens for r in done),
                     len(hashed) * bs, free * bs, (len(hashed) - free) * bs)


def lookup_of(run: TourRun, rid: str, step: int, k: int) -> LookupRecord | None:
    """The block lookup of `rid` if it has happened by (step, k)."""
    i = block_index(step, k, run.log.num_steps)
    return next((rec for s, rec in run.lookups if s < i and rec.rid == rid), None)


def rid_at(run: TourRun, step: int) -> str:
    """The request a step belongs to (its match .. its unlock); the first at the reset step,
    the last at the end."""
    return next((rid for rid, s in zip(run.rids, run.insert_steps) if step <= s + 1),
                run.rids[-1])


def first_step_of(run: TourRun, event: str, min_events: int = 1) -> tuple[int, int]:
    """The cursor (step, k) right after the first micro-event named `event` of a step with at
    least `min_events` of them: ("NodeSplit", 1) is the walk's first split; ("LockChanged", 4)
    the first lock walk of 4 hops or more, at its first hop."""
    for step in range(run.log.num_steps):
        micro = run.log.micro_events(step)
        hits = [i for i, e in enumerate(micro) if type(e).__name__ == event]
        if len(hits) >= min_events:
            return step, hits[0] + 1
    raise LookupError(f"the walk has no step with {min_events} {event} event(s)")
