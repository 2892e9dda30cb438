"""The eviction question in vLLM's block cache: the free queue's order and what it takes.

Same requests as viz/eviction_lab.py through `BlockCacheManager` (16-token blocks): the RAG
request (2,624 = 164 blocks) runs and finishes, its blocks freed last-first to the free queue's
tail; each conversation (536 tokens) hits S's 32 blocks, which leave the queue, and takes 2 blocks
of its own (one full and cached, one partial). The pool has exactly the blocks these requests
use, so nothing is free but the cached blocks of finished requests. A new request then needs
ceil(300 / 16) = 19 blocks: vLLM pops them from the queue's head, dropping their hashes.
Leaves out: the block grid's picture (viz/eviction_lab_grid.py).
"""

from __future__ import annotations

from typing import NamedTuple

from examples.workloads import SYSTEM_LEN, eviction_question
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockPoolSnapshot, unreachable_block_ids
from radix.request import Req
from viz.eviction_lab import NUM_CONVERSATIONS, TO_FREE

BLOCK_SIZE = 16  # vLLM's default


class QueueEntry(NamedTuple):
    pos: int  # place in the free queue (0 = taken first)
    block_id: int
    holds: str  # what the block caches, in words
    cached: bool  # carries a hash (taking it evicts cached KV)


class BlockEviction(NamedTuple):
    queue: list[QueueEntry]  # the free queue before the new request, head first
    num_wanted: int  # blocks the new request asks for: ceil(to_free / 16)
    num_needed: int  # blocks it takes: num_wanted, or the whole queue when that is shorter
    victims: list[QueueEntry]  # queue[:num_needed]
    cached_tokens_dropped: int  # 16 per cached victim
    unreachable_after: list[int]  # cached block ids no lookup can reach afterwards
    rag_repeat_hit: int  # tokens a repeat of the RAG request would reuse afterwards
    before: BlockPoolSnapshot
    after: BlockPoolSnapshot
    labels: dict[int, str]  # block id -> what it holds
    num_blocks: int  # the pool (without the null block)


def _blocks(n: int) -> int:
    return -(-n // BLOCK_SIZE)


def _run(m: BlockCacheManager, req: Req) -> list:
    hit = m.get_computed_blocks(req)
    m.allocate_slots(req, len(req.origin_input_ids) - hit.num_computed_tokens, hit)
    return list(m.requests[req.rid].blocks)


def _label(rid: str, pos: int, num_tokens: int) -> str:
    if pos < SYSTEM_LEN // BLOCK_SIZE:
        return f"S block {pos}"
    full = (pos + 1) * BLOCK_SIZE <= num_tokens
    if rid.startswith("rag"):
        return f"RAG block {pos}"
    return f"{rid} block {pos}" + ("" if full else " (partial, not cached)")


def run_block_eviction(num_live: int = NUM_CONVERSATIONS, to_free: int = TO_FREE,
                       seed: int = 0) -> BlockEviction:
    """The free queue, the victims and the damage. All 400 live: the queue holds RAG blocks
    163, 162, ..., 32 (132 blocks; S's 32 are in use); 19 go: RAG blocks 163..145 (304 tokens).
    No block is left unreachable (the chain is eaten from its tail) and a repeat of the RAG
    request still reuses blocks 0..144: 145 x 16 = 2,320 tokens.
    """
    rag, *convs = eviction_question(num_live=NUM_CONVERSATIONS, seed=seed)
    reqs = [Req(rag.rid, list(rag.token_ids), max_new_tokens=1)]
    reqs += [Req(c.rid, list(c.token_ids), max_new_tokens=c.output_len) for c in convs]
    shared = SYSTEM_LEN // BLOCK_SIZE
    num_blocks = _blocks(len(rag.token_ids)) + sum(
        _blocks(len(r.origin_input_ids)) - shared for r in reqs[1:])
    m = BlockCacheManager(BlockPool(num_blocks + 1, BLOCK_SIZE))
    labels: dict[int, str] = {}
    for req in reqs:
        for pos, block in enumerate(_run(m, req)):
            labels.setdefault(block.block_id, _label(req.rid, pos, len(req.origin_input_ids)))
        if req is reqs[0]:
            m.free(req)  # the RAG request finished before the conversations arrived
    for req in reqs[1: 1 + NUM_CONVERSATIONS - num_live]:
        m.free(req)  # finished conversations, oldest first
    before = m.snapshot()
    queue = [QueueEntry(i, b.block_id, labels[b.block_id], b.block_hash is not None)
             for i, b in enumerate(m.pool.free_block_queue)]
    need = min(_blocks(to_free), len(queue))  # more would fail: vLLM would preempt instead
    victims = queue[:need]
    m.pool.get_new_blocks(need)  # lazy eviction: the popped blocks' hashes go now
    after = m.snapshot()
    again = Req("rag-again", list(rag.token_ids))
    hit = m.get_computed_blocks(again).num_computed_tokens
    m.requests.pop("rag-again", None)  # a lookup only: it holds no blocks
    dropped = BLOCK_SIZE * sum(v.cached for v in victims)
    return BlockEviction(queue, _blocks(to_free), need, victims, dropped,
                         unreachable_block_ids(m.pool), hit, before, after, labels, num_blocks)
