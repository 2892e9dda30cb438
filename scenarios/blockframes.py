"""vLLM's block cache over a trace, with keyframes: the pool after any number of requests, fast.

Follows the tree's EventLog: one replay of the whole trace (`radix.runs.compare.run_blocks`'s
flow, one request at a time) keeps a keyframe of the pool every `every` requests (at most ~64
keyframes a trace: each costs a pass over the pool, so more would slow the upload); the pool after
n requests is the keyframe at or before n, restored into a fresh BlockCacheManager, plus at most
`every` requests replayed. A moving cursor (the last pool built) makes a step forward cost one
request. A keyframe is taken between two requests, when no request holds a block, so it is the
blocks' hashes (with parent hash and chain position), the free queue's order, the hash map's
order and the eviction count: ~55 bytes a cached block, pickled (not compressed: block hashes
are random bytes, zlib saved 16% for a third of the upload's time; a 1 M-token pool of 16-token
blocks: ~3.4 MB a keyframe). Restoring rewrites the cursor's pool in place.
subtle: restoring writes KVCacheBlock fields and the pool's hash map directly (radix/blocks has
no restore); tests check a restored pool against a replayed one and its invariants.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from radix.blocks.free_queue import FreeKVCacheBlockQueue, KVCacheBlock
from radix.blocks.hashing import BlockHasher
from radix.blocks.manager import BlockCacheManager, LookupRecord
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockPoolSnapshot
from radix.request import Req

MIN_EVERY, MAX_KEYFRAMES = 32, 64
Feed = Callable[[int, int], Iterable[tuple[Req, list[int]]]]  # (start, stop) -> (req, output)
Runner = Callable[..., dict]  # run_blocks(reqs, outputs, capacity, block_size, manager=, ...)


def capture(manager: BlockCacheManager) -> bytes:
    """The pool between requests, as compressed bytes (no request may hold a block)."""
    pool = manager.pool
    if manager.requests:
        raise ValueError("a keyframe needs every request freed")
    cached = [(b.block_id, b.block_hash, b.parent_hash, b.chain_pos)
              for b in pool.blocks if b.block_hash is not None]
    queue = [b.block_id for b in pool.free_block_queue]
    order = []  # the hash map: block ids in its order, a group per hash
    for entry in pool.cached_block_hash_to_block.values():
        order.append(entry.block_id if type(entry) is KVCacheBlock else list(entry))
    state = (pool.num_blocks, pool.block_size, pool.enable_caching, cached, queue, order,
             pool.num_evictions, pool._step)
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def restore(frame: bytes, into: BlockCacheManager | None = None,
            hash_algo: str | BlockHasher = "radixlens") -> BlockCacheManager:
    """A manager whose pool equals the one `capture` saw: a fresh one (hashing as `hash_algo`),
    or `into` (a manager of the same pool size, between requests) rewritten in place, which
    saves building every block."""
    num_blocks, block_size, caching, cached, queue, order, evictions, step = pickle.loads(frame)
    if into is not None and into.pool.num_blocks == num_blocks and not into.requests:
        pool = into.pool
        for b in pool.blocks:
            b.ref_cnt, b.block_hash, b.parent_hash, b.chain_pos = 0, None, None, -1
    else:
        pool = BlockPool(num_blocks, block_size, caching, hash_algo=hash_algo)
    blocks = pool.blocks
    for block_id, block_hash, parent_hash, chain_pos in cached:
        b = blocks[block_id]
        b.block_hash, b.parent_hash, b.chain_pos = block_hash, parent_hash, chain_pos
    for b in blocks:
        b.prev_free_block = b.next_free_block = None
    pool.free_block_queue = FreeKVCacheBlockQueue([blocks[i] for i in queue])
    table: dict[Any, Any] = {}
    for item in order:
        if isinstance(item, list):
            table[blocks[item[0]].block_hash] = {i: blocks[i] for i in item}
        else:
            table[blocks[item].block_hash] = blocks[item]
    pool.cached_block_hash_to_block = table
    pool.num_evictions, pool._step = evictions, step
    if into is not None and into.pool is pool:
        into.lookups = []
        return into
    return BlockCacheManager(pool)


class BlockAt(NamedTuple):
    snapshot: BlockPoolSnapshot  # the pool after `num_requests` requests
    num_requests: int
    num_evictions: int  # cached blocks dropped for reuse so far


class BlockFrames:
    """The pool after any prefix of a trace's requests.

    `feed(start, stop)` yields (Req, output tokens) for requests start..stop-1 (fresh Reqs, in
    order); `run(reqs, outputs, capacity, block_size, manager=..., rejected_rids=...)` is
    run_blocks. Building replays everything once and keeps a keyframe every `every` requests.
    `hash_algo`: how the pool hashes blocks (radix/blocks/hashing.py; hits do not depend on it).
    """

    def __init__(self, num_requests: int, feed: Feed, run: Runner, capacity: int,
                 block_size: int = 16, every: int | None = None,
                 progress: Callable[[int], None] | None = None,
                 hash_algo: str | BlockHasher = "radixlens") -> None:
        self.num_requests, self.feed, self.run = num_requests, feed, run
        self.hash_algo = hash_algo
        # default: a keyframe every 32 requests, fewer on long traces (at most ~64 keyframes)
        every = every or max(MIN_EVERY, -(-num_requests // MAX_KEYFRAMES))
        self.capacity, self.block_size, self.every = capacity, block_size, every
        self.manager = BlockCacheManager(BlockPool(capacity // block_size + 1, block_size,
                                                   hash_algo=hash_algo), hash_memo=True)
        self.frames: list[bytes] = []
        self.rejected: list[str] = []
        self.evictions: list[int] = []  # pool.num_evictions after each request
        self._progress = progress
        self.stats = self.run(self._framed(), self._outputs(), capacity, block_size,
                              manager=self.manager, rejected_rids=self.rejected)
        self.lookups: list[LookupRecord] = list(self.manager.lookups)
        self._cursor: tuple[int, BlockCacheManager] | None = None
        if num_requests % every == 0:  # the pool after the last request is a keyframe too
            self.frames.append(capture(self.manager))

    def _framed(self) -> Iterable[Req]:
        """The requests, a keyframe taken before every `every`-th (the previous one is freed by
        then: run_blocks pulls the next request only after finishing the last)."""
        self._outs: list[list[int]] = []
        for i, (req, out) in enumerate(self.feed(0, self.num_requests)):
            if i:
                self.evictions.append(self.manager.pool.num_evictions)
            if i % self.every == 0:
                self.frames.append(capture(self.manager))
                if self._progress is not None:
                    self._progress(i)
            self._outs.append(out)
            yield req
        self.evictions.append(self.manager.pool.num_evictions)

    def _outputs(self) -> Iterable[list[int]]:
        """Each request's output, handed over (and dropped here) right after its request: zip
        pulls the request first, which queues its output."""
        i = 0
        while i < len(self._outs):
            out, self._outs[i] = self._outs[i], []
            i += 1
            yield out

    @property
    def nbytes(self) -> int:
        return sum(len(f) for f in self.frames) + 64 * len(self.lookups)

    def manager_at(self, n: int) -> BlockCacheManager:
        """A manager whose pool is the one after the first n requests (not to be mutated)."""
        if not 0 <= n <= self.num_requests:
            raise IndexError(f"request count {n} out of range 0..{self.num_requests}")
        if self._cursor is not None and self._cursor[0] <= n < self._cursor[0] + self.every:
            start, manager = self._cursor
        else:
            start = n // self.every * self.every
            scratch = self._cursor[1] if self._cursor is not None else None
            manager = restore(self.frames[start // self.every], into=scratch,
                              hash_algo=self.hash_algo)
        if n > start:
            reqs = list(self.feed(start, n))
            # run_blocks ends by counting unreachable blocks over the whole pool: not needed
            # here (the snapshot has them), and it costs as much as the requests replayed
            manager.num_unreachable_blocks = lambda: None
            self.run([r for r, _ in reqs], [o for _, o in reqs], self.capacity, self.block_size,
                     manager=manager, rejected_rids=[])
        self._cursor = (n, manager)
        return manager

    def at(self, n: int) -> BlockAt:
        manager = self.manager_at(n)
        return BlockAt(manager.snapshot(), n, manager.pool.num_evictions)
