"""vLLM's block cache over a trace, with keyframes: the pool after any number of requests, fast.

Follows the tree's EventLog. One pass of run_blocks over the trace's requests, through a
BlockCacheManager whose storage is the array pool (blockbuilder.py), gives the summary (hits,
rejections, each request's lookup, the eviction count after each request) and keeps a keyframe of
the pool every `every` requests (at most ~64 a trace). The pool after n requests is the keyframe
at or before n,
restored into a BlockCacheManager over a BlockPool, plus at most `every` requests run through it
by run_blocks (a compact prompt's tokens packed by numpy). A moving cursor (the last pool built)
makes a step forward cost one request. A keyframe is taken between two requests, when no
request holds a block, so it is the blocks' hashes (with parent hash and chain position), the
free queue's order, the hash map's order and the eviction count, column by column: ~44 bytes a
cached block, pickled (not compressed: block hashes are random bytes, zlib saved 16% for a
third of the upload's time; a 1 M-token pool of 16-token blocks: ~2.7 MB a keyframe). The array
pool's keyframes wait as Frames (blockbuilder.py: its arrays, hashes as ids, ~1.7 MB on that
pool) until one is restored: only the keyframes shown are hashed and pickled.
Why two storages: the array pool names a hash by an id from a trie of every block prefix of the
trace (1.6 M on the conversation stand-in, ~100 MB, outside the session's budget), dropped after
the pass; a step between keyframes runs on the per-block pool a keyframe restores (hashes, not
ids), which is also what the block view draws (its snapshot: block ids, states, the free queue).
subtle: restoring writes KVCacheBlock fields and the pool's hash map directly (radix/blocks has
no restore); tests check a restored pool against a replayed one and its invariants.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterable
from itertools import compress
from operator import attrgetter, not_
from typing import Any, NamedTuple

from radix.blocks.hashing import BlockHasher
from radix.blocks.manager import BlockCacheManager, LookupRecord
from radix.blocks.pool import BlockPool, FreeKVCacheBlockQueue, KVCacheBlock
from radix.blocks.snapshot import BlockPoolSnapshot
from radix.request import Req
from radix.runs.compare import fewer_collections, run_blocks
from scenarios.blockbuilder import ArrayPool, Frame
from scenarios.blockhashes import SEGMENT_BYTES, pack_runs

MIN_EVERY, MAX_KEYFRAMES = 32, 64
FRAME_BLOCK_BYTES = 60  # a cached block in a keyframe (hash, parent hash, ids), pickled
Feed = Callable[[int, int], Iterable[tuple[Req, list[int]]]]  # (start, stop) -> (req, output)


_HASH, _PARENT, _POS = (attrgetter(a) for a in ("block_hash", "parent_hash", "chain_pos"))
_ID = attrgetter("block_id")


def capture(manager: BlockCacheManager) -> bytes:
    """The pool between requests, as bytes (no request may hold a block).

    Column by column, each read in C (attrgetter over the blocks, no tuple per block; a tuple
    per cached block and its pickling were most of a keyframe's cost): every block's chain
    position (-1: not cached); the cached blocks' hashes in id order, joined into one string
    when they have one length; for each cached block past position 0 its parent's hash as
    1 + the index of a cached block carrying it (parents are mostly still cached: a chain is
    freed last block first, so evicted tail first), or None and the hash itself among
    `lost`; the free queue's ids; the hash map's order."""
    pool = manager.pool
    if manager.requests:
        raise ValueError("a keyframe needs every request freed")
    blocks = pool.blocks
    positions = list(map(_POS, blocks))
    hashes: Any = list(filter(None, map(_HASH, blocks)))
    parents = list(filter(None, map(_PARENT, blocks)))
    refs = list(map(dict(zip(hashes, range(1, len(hashes) + 1))).get, parents))
    lost: Any = list(compress(parents, map(not_, refs)))
    width = len(hashes[0]) if hashes else 0
    if hashes and set(map(len, hashes)) | set(map(len, lost)) == {width}:
        hashes, lost = b"".join(hashes), b"".join(lost)
    else:
        width = 0
    queue = []
    append, block, tail = queue.append, pool.free_block_queue.fake_head.next_free_block, \
        pool.free_block_queue.fake_tail
    while block is not tail:
        append(block.block_id)
        block = block.next_free_block
    entries = pool.cached_block_hash_to_block.values()
    if dict in set(map(type, entries)):  # a hash on several blocks: its ids, first cached first
        order = [e.block_id if type(e) is KVCacheBlock else list(e) for e in entries]
    else:
        order = list(map(_ID, entries))
    state = (pool.num_blocks, pool.block_size, pool.enable_caching, positions, width, hashes,
             refs, lost, queue, order, pool.num_evictions, pool._step)
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def restore(frame: bytes, into: BlockCacheManager | None = None,
            hash_algo: str | BlockHasher = "radixlens") -> BlockCacheManager:
    """A manager whose pool equals the one `capture` saw: a fresh one (hashing as `hash_algo`,
    a compact prompt packed by `pack_runs`), or `into` (a manager of the same pool size,
    between requests) rewritten in place, which saves building every block."""
    (num_blocks, block_size, caching, positions, width, hashes, refs, lost, queue, order,
     evictions, step) = pickle.loads(frame)
    if into is not None and into.pool.num_blocks == num_blocks and not into.requests:
        pool = into.pool
        for b in pool.blocks:
            b.ref_cnt, b.block_hash, b.parent_hash, b.chain_pos = 0, None, None, -1
    else:
        pool = BlockPool(num_blocks, block_size, caching, hash_algo=hash_algo)
    blocks = pool.blocks
    if width:
        hashes = [hashes[k:k + width] for k in range(0, len(hashes), width)]
        lost = [lost[k:k + width] for k in range(0, len(lost), width)]
    found, ref, gone = iter(hashes), iter(refs), iter(lost)
    for b, chain_pos in zip(blocks, positions):
        if chain_pos >= 0:
            b.block_hash, b.chain_pos = next(found), chain_pos
            if chain_pos:
                k = next(ref)
                b.parent_hash = next(gone) if k is None else hashes[k - 1]
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
    return BlockCacheManager(pool, pack=pack_runs)


class BlockAt(NamedTuple):
    snapshot: BlockPoolSnapshot  # the pool after `num_requests` requests
    num_requests: int
    num_evictions: int  # cached blocks dropped for reuse so far


class BlockFrames:
    """The pool after any prefix of a trace's requests.

    `feed(start, stop)` yields (Req, output tokens) for requests start..stop-1 (fresh Reqs, in
    order). Made by one pass of run_blocks over every request, on the array pool: `stats`,
    `rejected`, `lookups` (one LookupRecord a request), `evictions` (the count after each
    request) and the keyframes, frames[k] the pool before request k * every, and the pool after
    every request (the block view's first picture). On the 12,031-request conversation
    stand-in the pass is ~2 CPU-s; it was a summary pass over block extents (~0.9 s) and,
    past 2,000 requests, a replay of the keyframes when a button asked for it (~1.8 s), which
    kept only every other one.

    `hash_algo`: how the pool hashes blocks (radix/blocks/hashing.py; hits do not depend on it).
    One lock guards the cursor: two threads reading one replay take turns.
    """

    def __init__(self, num_requests: int, feed: Feed, capacity: int, block_size: int = 16,
                 every: int | None = None, progress: Callable[[int], None] | None = None,
                 hash_algo: str | BlockHasher = "radixlens") -> None:
        self.num_requests, self.feed = num_requests, feed
        self.hash_algo = hash_algo
        every = every or default_every(num_requests)
        self.capacity, self.block_size, self.every = capacity, block_size, every
        self.num_blocks = capacity // block_size + 1  # block 0 is vLLM's null block
        self.rejected: list[str] = []
        self.evictions: list[int] = []  # cached blocks evicted so far, after each request
        self._progress = progress
        pool = ArrayPool(self.num_blocks, block_size, hash_algo)
        manager = BlockCacheManager(pool)
        # a keyframe of the array pool is a Frame (its hashes as ids) until it is restored
        self.frames: list[bytes | Frame] = [pool.frame()]
        self._last: bytes | Frame | None = None  # the pool after every request
        # fewer collections: the pass allocates small objects by the million (trie keys,
        # walks): on the conversation stand-in 528 collections, 48 of them of the middle
        # generation, against 5 and 1 (0.5-0.9 of ~4.5 CPU-s beside a 3 M-object heap)
        with fewer_collections():
            self.stats = run_blocks(self._counted(manager, pool), self._outputs(), capacity,
                                    block_size, manager=manager, rejected_rids=self.rejected)
        self.lookups: list[LookupRecord] = manager.lookups
        # the pool's trie (an id for every distinct block prefix of the trace) is never used
        # again; the frames' hashes (their sequences, kept by the trace anyway) keep none of
        # the hashes they compute
        pool.memo.hashes.forget()
        self._cursor: tuple[int, BlockCacheManager] | None = None
        self._lock = threading.RLock()

    def _counted(self, manager: BlockCacheManager, pool: ArrayPool) -> Iterable[Req]:
        """The requests; between two (run_blocks pulls the next request only after finishing
        the last) the eviction count, a keyframe every `every` requests and progress."""
        self._outs: list[list[int]] = []
        for i, (req, out) in enumerate(self.feed(0, self.num_requests)):
            if i:
                self.evictions.append(manager.num_evictions)
            if i % self.every == 0:
                if i:
                    self.frames.append(pool.frame())
                if self._progress is not None:
                    self._progress(i)
            self._outs.append(out)
            yield req
        self.evictions.append(manager.num_evictions)
        n = self.num_requests
        if n and n % self.every == 0:
            self.frames.append(pool.frame())
        elif n:
            self._last = pool.frame()

    def _outputs(self) -> Iterable[list[int]]:
        """Each request's output, handed over (and dropped here) right after its request: zip
        pulls the request first, which queues its output."""
        i = 0
        while i < len(self._outs):
            out, self._outs[i] = self._outs[i], []
            i += 1
            yield out

    @property
    def num_frames(self) -> int:
        """Keyframes the trace has: the pool before requests 0, every, 2 * every, ... <= n."""
        return self.num_requests // self.every + 1

    @staticmethod
    def max_nbytes(num_requests: int, capacity: int, block_size: int = 16,
                   every: int | None = None) -> int:
        """What a BlockFrames of these sizes may hold at most, known before the pass, so a
        session's budget can refuse it first: every keyframe with each block cached (~60 bytes
        a block), the sequences the keyframes hash from (two segments a request) and a lookup
        a request. 40 requests, every 32: keyframes 0 and 1 and the pool after the 40th, of 3
        blocks (with the null block): 3 x 3 x 60 + 40 x (2 x 600 + 64).

        >>> BlockFrames.max_nbytes(40, 32, 16, every=32)
        51100
        """
        num_frames = num_requests // (every or default_every(num_requests)) + 2  # + the last
        per_request = 2 * SEGMENT_BYTES + 64
        return (FRAME_BLOCK_BYTES * (capacity // block_size + 1) * num_frames
                + per_request * num_requests)

    def keyframe(self, k: int) -> bytes:
        """Keyframe k (-1: the pool after every request, when n is not a multiple of `every`)
        as `capture` gives it, its hashes computed the first time it is asked for."""
        with self._lock:
            return self._frame(k)

    def _frame(self, k: int) -> bytes:
        frame = self._last if k < 0 else self.frames[k]
        assert frame is not None, "no pool after every request: the last keyframe is it"
        if isinstance(frame, Frame):
            frame = frame.capture()
            if k < 0:
                self._last = frame
            else:
                self.frames[k] = frame
        return frame

    def _replay(self, manager: BlockCacheManager, start: int, stop: int) -> None:
        """Requests start..stop-1 through `manager`'s pool (run_blocks)."""
        pairs = list(self.feed(start, stop))
        # run_blocks ends by counting unreachable blocks over the whole pool: not needed here
        # (a snapshot or keyframe has them), and it costs as much as the requests replayed
        manager.num_unreachable_blocks = lambda: None
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], self.capacity, self.block_size,
                   manager=manager, rejected_rids=[])

    @property
    def nbytes(self) -> int:
        """What it holds (at most `max_nbytes`): the keyframes, the sequences the ones not
        restored yet hash from, the lookups."""
        frames = [*self.frames, self._last]
        built = sum(_size(f) for f in frames)
        pending = [f for f in frames if isinstance(f, Frame)]
        built += pending[0].hashes.nbytes if pending else 0  # the sequences they hash from
        return built + 64 * len(self.lookups)

    def manager_at(self, n: int) -> BlockCacheManager:
        """A manager whose pool is the one after the first n requests (not to be mutated)."""
        if not 0 <= n <= self.num_requests:
            raise IndexError(f"request count {n} out of range 0..{self.num_requests}")
        with self._lock:
            return self._manager_at(n)

    def _manager_at(self, n: int) -> BlockCacheManager:
        if self._cursor is not None and self._cursor[0] <= n < self._cursor[0] + self.every:
            start, manager = self._cursor
        else:
            k = n // self.every
            start = k * self.every
            scratch = self._cursor[1] if self._cursor is not None else None
            if n == self.num_requests and self._last is not None:
                start, k = n, -1
            manager = restore(self._frame(k), into=scratch, hash_algo=self.hash_algo)
        if n > start:
            self._replay(manager, start, n)
        self._cursor = (n, manager)
        return manager

    def at(self, n: int) -> BlockAt:
        # fewer collections: a restored pool and its snapshot are ~60 K objects each (a
        # KVCacheBlock, a BlockState a block), whose allocation set off collections that
        # walked the app's whole heap (a replay's event log, its tree keyframes): 1.1 of the
        # 1.7 CPU-s of the conversation stand-in's last pool
        with self._lock, fewer_collections():
            manager = self.manager_at(n)
            return BlockAt(manager.snapshot(), n, manager.pool.num_evictions)


def default_every(num_requests: int) -> int:
    """Requests between keyframes: 32, more on long traces (at most ~64 keyframes)."""
    return max(MIN_EVERY, -(-num_requests // MAX_KEYFRAMES))


def _size(frame: bytes | Frame | None) -> int:
    return 0 if frame is None else frame.nbytes if isinstance(frame, Frame) else len(frame)
