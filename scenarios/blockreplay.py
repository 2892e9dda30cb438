"""run_blocks' flow over a BlockCacheManager between requests, fast: the keyframe builder's loop.

`replay_blocks(manager, pairs)` leaves the pool exactly as `run_blocks([r for r, _ in pairs],
[o for _, o in pairs], ..., manager=manager)` does (block ids, hashes, free-queue order, the hash
map's order, the eviction count), without its stats and LookupRecords, for requests that arrive
one at a time into a pool no request holds: then every lookup hit is a free block (ref_cnt 0),
admission needs `num_new + num_hits` free blocks, and the blocks a request holds it alone holds
(their ref_cnt, 1 while held, is not written: 0 before and after).
The known hit counts of the block-extent summary (`hit_blocks`) let a lookup read the hash map
in C (checked, not trusted); allocation pops and evicts in one pass, caching takes one dict
operation a block. Falls back to run_blocks for a pool with a sink, with caching off or with
requests still holding blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from radix.blocks.hashing import BlockHash, hash_request_tokens
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool, KVCacheBlock
from radix.request import Req
from radix.runs.compare import run_blocks
from radix.tokens import TokenRuns


def replay_blocks(manager: BlockCacheManager, pairs: Sequence[tuple[Req, Sequence[int]]],
                  hit_blocks: Sequence[int] | None = None) -> None:
    """The requests of `pairs` (fresh Reqs, their outputs) through `manager`'s pool, one at a
    time, each looked up, admitted (or rejected), decoded and freed as run_blocks does;
    `hit_blocks[k]`: request k's expected hit, in blocks (a wrong one costs only time).

    >>> a, b = (BlockCacheManager(BlockPool(4, 2)) for _ in "ab")
    >>> reqs = lambda: [(Req("x", [1, 2, 3, 4, 5]), [7, 8]), (Req("y", [1, 2, 9]), [6])]
    >>> replay_blocks(a, reqs()); _ = run_blocks(*zip(*reqs()), 8, 2, manager=b)
    >>> a.snapshot() == b.snapshot(), a.pool.num_evictions
    (True, 1)
    """
    pool = manager.pool
    if pool._sink is not None or not pool.enable_caching or manager.requests:
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], pool.num_blocks * pool.block_size,
                   pool.block_size, manager=manager, rejected_rids=[])
        return
    bs, queue = pool.block_size, pool.free_block_queue
    for k, (req, out) in enumerate(pairs):
        hashes = _hashes(manager, req)
        prompt_len = len(req.origin_input_ids)
        max_blocks = (prompt_len - 1) // bs if prompt_len else 0
        hits = _lookup(pool, hashes, max_blocks, None if hit_blocks is None else hit_blocks[k])
        num_hits = len(hits)
        num_new = -(-prompt_len // bs) - num_hits
        if num_new + num_hits > queue.num_free_blocks:
            continue  # rejected: run_blocks' allocate_slots changes nothing
        _touch(pool, hits)
        blocks = hits + _take(pool, num_new) if num_new else hits
        num_cached = prompt_len // bs
        _store(pool, blocks, hashes, num_hits, num_cached)
        span = decode_span(req, out, len(blocks), queue.num_free_blocks, bs)
        if span is not None:
            more, num_full = span
            if more:
                blocks = blocks + _take(pool, more)
            if num_full > num_cached:
                if len(hashes) < num_full:
                    tokens = req.origin_input_ids + req.output_ids
                    hash_request_tokens(tokens[:num_full * bs], bs, req.extra_key,
                                        req.cache_salt, hashes, manager.hasher, pack_runs)
                _store(pool, blocks, hashes, num_cached, num_full)
                num_cached = num_full
        _release(pool, blocks, num_cached)


def decode_span(req: Req, out: Sequence[int], held: int, free: int,
                bs: int) -> tuple[int, int] | None:
    """The decode tokens of run_blocks' _decode_blocks, for a replay (replay_blocks and
    scenarios/blockbuilder.py's array pool): as many of `out` as the `held` and `free` blocks
    hold, the token after them too, appended to `req.output_ids`; then (blocks to take, full
    blocks of the sequence), or None when no decode token was run or its blocks do not fit.

    >>> from radix.request import Req
    >>> r = Req("a", [1, 2, 3])
    >>> decode_span(r, [7, 8, 9, 10, 11], held=1, free=1, bs=4), r.output_ids
    ((1, 1), [7, 8, 9, 10, 11])
    """
    prompt_len = len(req.origin_input_ids)
    num = max(0, min(len(out) - 1, (held + free) * bs - prompt_len))
    req.output_ids.extend(out[:min(len(out), num + 1)])
    if not num:
        return None
    total = prompt_len + num
    more = -(-total // bs) - held
    return (max(more, 0), total // bs) if more <= free else None


def _hashes(manager: BlockCacheManager, req: Req) -> list[BlockHash]:
    """BlockCacheManager.hash_request for a request it does not hold, compact prompts packed
    by `pack_runs`."""
    tokens = req.origin_input_ids + req.output_ids

    def compute(known: list[BlockHash]) -> list[BlockHash]:
        return hash_request_tokens(tokens, manager.block_size, req.extra_key, req.cache_salt,
                                   known, manager.hasher, pack_runs)
    if manager.memo is None:
        return compute([])
    return manager.memo.hashes(tokens, (req.extra_key, req.cache_salt), compute)


def pack_runs(tokens: Sequence[int]) -> bytes | None:
    """A TokenRuns as little-endian int64s, the bytes struct.pack gives, built by numpy run by
    run (a Mooncake prompt: runs of 512; expanding it into ints to pack cost a tenth of the
    block replay), or None: not a TokenRuns, or a token past int64.
    subtle: the runs' offsets are summed here, not by ndarray.cumsum: cumsum keeps a few KB of
    small objects as it meets new inputs, and those made late in a replay pinned 10-20 of
    the 1 MiB pymalloc arenas the dropped replay had emptied, more each upload
    (tests/scenarios/test_memory_given_back.py).

    >>> import struct
    >>> pack_runs(TokenRuns([(7, 2), (1, 1)])) == struct.pack("<3q", 7, 8, 1)
    True
    """
    if type(tokens) is not TokenRuns or not tokens:
        return None
    firsts, lengths, offset = [], [], 0
    for start, length in tokens.runs():  # the token at position i, in run k: firsts[k] + i
        if start - offset < _MIN64 or start + length > _END64:
            return None
        firsts.append(start - offset)
        lengths.append(length)
        offset += length
    out = np.repeat(np.array(firsts, dtype=np.int64), lengths)
    out += np.arange(offset, dtype=np.int64)
    return out.astype("<i8", copy=False).tobytes()


_MIN64, _END64 = -(1 << 63), 1 << 63


def _lookup(pool: BlockPool, hashes: list, max_blocks: int, expect: int | None
            ) -> list[KVCacheBlock]:
    """The first-cached block of each hash from the start, up to the first miss (at most
    `max_blocks`): with `expect`, the hash map read in C and the answer checked."""
    cache = pool.cached_block_hash_to_block
    if expect is not None and 0 <= expect <= max_blocks:
        found = list(map(cache.get, hashes[:expect]))
        if None not in found and (expect == max_blocks or hashes[expect] not in cache):
            if dict not in set(map(type, found)):
                return found
            return [e if type(e) is KVCacheBlock else next(iter(e.values())) for e in found]
    hits = []
    for block_hash in hashes[:max_blocks]:
        entry = cache.get(block_hash)
        if entry is None:
            break
        hits.append(entry if type(entry) is KVCacheBlock else next(iter(entry.values())))
    return hits


def _touch(pool: BlockPool, hits: list[KVCacheBlock]) -> None:
    """Hits of a pool no request holds: each out of the free queue (its ref_cnt stays 0 and
    its own links stale until `_release` relinks it: nothing reads them in between)."""
    for block in hits:
        prev, nxt = block.prev_free_block, block.next_free_block
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
    pool.free_block_queue.num_free_blocks -= len(hits)


def _take(pool: BlockPool, n: int) -> list[KVCacheBlock]:
    """BlockPool.get_new_blocks(n) without a sink: the queue's first n blocks, unlinked and
    evicted in one pass (a hash several blocks carry keeps its place in the map's order);
    ref_cnt and links as `_touch` leaves them."""
    queue, cache = pool.free_block_queue, pool.cached_block_hash_to_block
    out: list[KVCacheBlock] = []
    append = out.append
    block = queue.fake_head.next_free_block
    evicted = 0
    for _ in range(n):
        append(block)
        block_hash = block.block_hash
        if block_hash is not None:
            entry = cache[block_hash]
            if type(entry) is KVCacheBlock:
                del cache[block_hash]
            else:
                del entry[block.block_id]
                if len(entry) == 1:
                    cache[block_hash] = next(iter(entry.values()))
            block.block_hash = block.parent_hash = None
            block.chain_pos = -1
            evicted += 1
        block = block.next_free_block
    queue.fake_head.next_free_block = block
    block.prev_free_block = queue.fake_head
    queue.num_free_blocks -= n
    pool.num_evictions += evicted
    return out


def _store(pool: BlockPool, blocks: list[KVCacheBlock], hashes: list, lo: int, hi: int) -> None:
    """BlockPool.cache_full_blocks(blocks, hashes, lo, hi) without a sink."""
    if lo >= hi:
        return
    setdefault = pool.cached_block_hash_to_block.setdefault
    parent = hashes[lo - 1] if lo else None
    for i in range(lo, hi):
        block, block_hash = blocks[i], hashes[i]
        block.block_hash, block.parent_hash, block.chain_pos = block_hash, parent, i
        entry = setdefault(block_hash, block)
        if entry is not block:  # a duplicate (vLLM does not dedupe)
            if type(entry) is KVCacheBlock:
                pool.cached_block_hash_to_block[block_hash] = {entry.block_id: entry,
                                                               block.block_id: block}
            else:
                entry[block.block_id] = block
        parent = block_hash


def _release(pool: BlockPool, blocks: list[KVCacheBlock], num_hashed: int) -> None:
    """FreeKVCacheBlockQueue.release(reversed(blocks)) for blocks only this request held, the
    first `num_hashed` cached: those to the tail, last first; the rest (a partial block at
    most) to the head, last first."""
    queue = pool.free_block_queue
    tail = queue.fake_tail
    prev = tail.prev_free_block
    for block in blocks[num_hashed - 1::-1] if num_hashed else ():
        prev.next_free_block = block
        block.prev_free_block = prev
        prev = block
    prev.next_free_block = tail
    tail.prev_free_block = prev
    queue.num_free_blocks += num_hashed
    if len(blocks) > num_hashed:
        queue.prepend_n(blocks[:num_hashed - 1:-1] if num_hashed else blocks[::-1])
