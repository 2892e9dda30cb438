"""vLLM's block pool as numpy arrays, a storage behind BlockCacheManager for run_blocks' flow,
its keyframes byte for byte what `capture` takes of a BlockPool that ran the same requests.

BlockFrames (blockframes.py) runs a whole trace through it once: the block view's summary and its
keyframes in one pass. Per block, in Python, that was ~17 s of the 12,031-request conversation
stand-in: a pop, an eviction, a store, a release for every one of ~3.5 M blocks. Here a call
costs a few numpy operations over the request's block ids, whatever its length:
- a hash is an int, its id (blockhashes.py: equal ids are equal hashes; the 32-byte hashes are
  computed when a keyframe reads them);
- the hash map is an array by id (the first block cached under it, -1: none) with the order
  each id entered it (a dict's order); a hash on several blocks (a fully cached prompt
  recomputes its last block) is kept apart, in a dict of lists, as BlockPool does;
- the free queue is a log of block ids with each free block's place in it: a hit or a pop
  leaves a stale entry behind (skipped when the head passes it), a release writes at the tail
  (hashed blocks) or just before the head (the unhashed), and the log is compacted when full.
Leaves out: caching off, event sinks, snapshots (a keyframe restored into a BlockPool has them),
and more than one live request: ref counts are not kept, so a hit is always a free block.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from radix.blocks.hashing import BlockHasher
from radix.blocks.manager import ComputedBlocks, UnsupportedByStorage, allocation_total
from radix.request import Req
from radix.tokens.runs import Walk
from scenarios.blockhashes import WIDTH, BlockHashes, HashIds


class _Held:
    """What an ArrayPool holds for its one live request."""

    __slots__ = ("ids", "walk", "ns", "blocks", "num_cached", "num_computed_tokens")

    def __init__(self, ids: np.ndarray, walk: Walk | None, ns: tuple) -> None:
        self.ids, self.walk, self.ns = ids, walk, ns  # its full blocks' hash ids so far
        self.blocks = ids[:0]  # the block table, in token order
        self.num_cached = 0  # blocks[:n] carry their hash
        self.num_computed_tokens = 0


class ArrayPool:
    """A BlockPool of `num_blocks` (block 0: the null block) for one request at a time: the
    storage a BlockCacheManager drives (lookup, allocate, release, as it drives an ExtentPool)
    through run_blocks; `capture()` is scenarios/blockframes.py capture of that pool.

    >>> from radix.blocks.manager import BlockCacheManager
    >>> from radix.blocks.pool import BlockPool
    >>> from radix.runs.compare import run_blocks
    >>> from scenarios.blockframes import capture
    >>> a, m = BlockCacheManager(ArrayPool(4, 2)), BlockCacheManager(BlockPool(4, 2))
    >>> reqs = lambda: [(Req("x", [1, 2, 3, 4, 5]), [7, 8]), (Req("y", [1, 2, 9]), [6])]
    >>> run_blocks(*zip(*reqs()), 8, 2, manager=a) == run_blocks(*zip(*reqs()), 8, 2, manager=m)
    True
    >>> a.pool.capture() == capture(m), a.num_evictions, a.lookups[1].hit_blocks
    (True, 1, 1)
    """

    def __init__(self, num_blocks: int, block_size: int = 16,
                 hash_algo: str | BlockHasher = "radixlens") -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (block 0 is null), got {num_blocks}")
        self.num_blocks, self.block_size = num_blocks, block_size
        hasher = hash_algo if isinstance(hash_algo, BlockHasher) else BlockHasher(hash_algo)
        self.memo = HashIds(hasher, block_size)  # the ids and the hashes
        self.requests: dict[str, _Held] = {}  # the live request (one at most)
        self.pos = np.full(num_blocks, -1, np.int64)  # chain position; -1: not cached
        self.hid = np.full(num_blocks, -1, np.int64)  # id of the block's hash
        self.parent = np.full(num_blocks, -1, np.int64)  # id of its parent's hash
        # the hash map, by id: the first block cached under it (-1: none), when it entered
        self.first = np.full(1024, -1, np.int64)
        self.entered = np.zeros(1024, np.int64)
        self.shared = np.zeros(1024, bool)  # several blocks carry it: `groups`
        self.groups: dict[int, list[int]] = {}  # id -> its blocks, first cached first
        self._entries = 0
        self.num_evictions = 0
        # the free queue: where[b] is block b's index in the log, -1 when b is not free
        self.where = np.full(num_blocks, -1, np.int64)
        self.log = np.zeros(0, np.int64)
        self.head = self.tail = 0
        self.num_free = 0
        self._compact(np.arange(1, num_blocks, dtype=np.int64))

    def get_num_free_blocks(self) -> int:
        return self.num_free

    # ------------------------------------------------------------------ the free queue
    def _compact(self, queue: np.ndarray, room: int = 0) -> None:
        """The log rewritten to hold `queue` (head first), with room on both sides."""
        n = self.num_blocks
        front = max(64, n // 4)
        self.log = np.zeros(front + len(queue) + max(n, room) + 64, np.int64)
        self.head, self.tail = front, front + len(queue)
        self.log[self.head:self.tail] = queue
        self.where[queue] = np.arange(self.head, self.tail)
        self.num_free = len(queue)

    def queue(self) -> np.ndarray:
        """The free blocks, head (taken first) to tail."""
        seg = self.log[self.head:self.tail]
        return seg[self.where[seg] == np.arange(self.head, self.tail)]

    def _pop(self, n: int) -> np.ndarray:
        """The queue's first n blocks, out of it (n <= num_free)."""
        got: list[np.ndarray] = []
        log, where, head = self.log, self.where, self.head
        while n:
            stop = min(head + max(2 * n, 64), self.tail)
            seg = log[head:stop]
            live = np.flatnonzero(where[seg] == np.arange(head, stop))
            if len(live) >= n:
                got.append(seg[live[:n]])
                head += int(live[n - 1]) + 1
                break
            got.append(seg[live])
            n -= len(live)
            head = stop
        self.head = head
        out = got[0] if len(got) == 1 else np.concatenate(got)
        where[out] = -1
        self.num_free -= len(out)
        return out

    def _release(self, blocks: np.ndarray, num_hashed: int) -> None:
        """FreeKVCacheBlockQueue.release(reversed(blocks)) of blocks only one request held:
        the first `num_hashed` (cached) to the tail, last first; the rest to the head, the
        last becoming the head."""
        back, front = blocks[num_hashed - 1::-1] if num_hashed else blocks[:0], \
            blocks[:num_hashed - 1:-1] if num_hashed else blocks[::-1]
        if self.tail + len(back) > len(self.log) or self.head < len(front):
            self._compact(self.queue(), len(back))
        log, where = self.log, self.where
        if len(back):
            log[self.tail:self.tail + len(back)] = back
            where[back] = np.arange(self.tail, self.tail + len(back))
            self.tail += len(back)
        if len(front):
            log[self.head - len(front):self.head] = front
            where[front] = np.arange(self.head - len(front), self.head)
            self.head -= len(front)
        self.num_free += len(blocks)

    # ------------------------------------------------------------------ the hash map
    def _grow(self, count: int) -> None:
        if count > len(self.first):
            size = max(2 * len(self.first), count)
            for name, fill in (("first", -1), ("entered", 0), ("shared", False)):
                old = getattr(self, name)
                new = np.full(size, fill, old.dtype)
                new[:len(old)] = old
                setattr(self, name, new)

    def _evict(self, blocks: np.ndarray) -> None:
        """Popped blocks lose their hashes (BlockPool.get_new_blocks' lazy eviction)."""
        ids = self.hid[blocks]
        hashed = ids >= 0
        if not hashed.any():
            return
        blocks, ids = blocks[hashed], ids[hashed]
        if self.shared[ids].any():
            for b, h in zip(blocks.tolist(), ids.tolist(), strict=True):
                if self.shared[h]:
                    group = self.groups[h]
                    group.remove(b)
                    self.first[h] = group[0]
                    if len(group) == 1:
                        del self.groups[h]
                        self.shared[h] = False
                else:
                    self.first[h] = -1
        else:
            self.first[ids] = -1
        self.hid[blocks] = self.parent[blocks] = self.pos[blocks] = -1
        self.num_evictions += len(blocks)

    def _store(self, blocks: np.ndarray, ids: np.ndarray, lo: int, hi: int) -> None:
        """BlockPool.cache_full_blocks(blocks, hashes, lo, hi): blocks[lo:hi] take ids[lo:hi]
        (all distinct: one chain)."""
        if lo >= hi:
            return
        carriers, hs = blocks[lo:hi], ids[lo:hi]
        self.hid[carriers] = hs
        self.pos[carriers] = np.arange(lo, hi)
        if lo:
            self.parent[carriers] = ids[lo - 1:hi - 1]
        else:
            self.parent[carriers[0]] = -1
            self.parent[carriers[1:]] = ids[:hi - 1]
        new = self.first[hs] < 0
        if new.all():
            fresh, held = hs, None
        else:
            fresh, held = hs[new], np.flatnonzero(~new)
            carriers_new = carriers[new]
        self.first[fresh] = carriers if held is None else carriers_new
        self.entered[fresh] = np.arange(self._entries, self._entries + len(fresh))
        self._entries += len(fresh)
        if held is not None:  # a hash already cached: one more block carries it
            for j in held.tolist():
                h, b = int(hs[j]), int(carriers[j])
                if self.shared[h]:
                    self.groups[h].append(b)
                else:
                    self.groups[h] = [int(self.first[h]), b]
                    self.shared[h] = True

    # ------------------------------------------------------------------ the manager's calls
    def lookup(self, req: Req) -> ComputedBlocks:
        """BlockCacheManager.get_computed_blocks: the cached prefix of a request that holds no
        blocks yet, capped at its num_tokens - 1 tokens. Changes no block; hands out the ids
        of its full blocks."""
        held = self.requests.get(req.rid)
        if held is not None and len(held.blocks):
            raise ValueError(f"request {req.rid!r} already holds blocks; look up before allocating")
        if self.requests.keys() - {req.rid}:
            raise ValueError(f"an ArrayPool holds one request at a time: {req.rid!r} looked up "
                             f"while {next(iter(self.requests))!r} holds blocks")
        bs, tokens = self.block_size, req.all_ids
        num_tokens = len(tokens)
        ns = (req.extra_key or None, req.cache_salt or None)
        ids = self.memo.ids(tokens, ns, num_tokens // bs, req.extra_key, req.cache_salt)
        self._grow(self.memo.count)
        self.requests[req.rid] = _Held(ids, self.memo.walk, ns)
        max_blocks = (num_tokens - 1) // bs if num_tokens else 0
        found = self.first[ids[:max_blocks]]
        miss = np.flatnonzero(found < 0)
        if len(miss):
            reached, reason = int(miss[0]), "miss"
        else:
            reached, reason = max_blocks, "cap" if num_tokens // bs > max_blocks else "partial"
        return ComputedBlocks(found[:reached], reached * bs, reached, reached, reason)

    def allocate(self, req: Req, num_new_tokens: int, hit: ComputedBlocks | None,
                 prepaid: bool) -> int | None:
        """BlockCacheManager.allocate_slots: the number of new blocks taken, or None (nothing
        changed) when the free queue is short."""
        if prepaid:
            raise UnsupportedByStorage("an ArrayPool takes no prepaid blocks (reserve_blocks)")
        held = self.requests.get(req.rid)
        if held is None:
            raise ValueError(f"request {req.rid!r}: an ArrayPool allocates after a lookup")
        num_hit = hit.num_blocks if hit is not None else 0
        bs = self.block_size
        total = allocation_total(req, num_hit, len(held.blocks), held.num_computed_tokens, bs,
                                 num_new_tokens)
        num_new = max(0, -(-total // bs) - len(held.blocks) - num_hit)
        if num_new + num_hit > self.num_free:  # every hit is free: one request at a time
            return None
        blocks = held.blocks
        if num_hit:
            blocks = hit.blocks
            self.where[blocks] = -1  # out of the queue (the log entries go stale)
            self.num_free -= num_hit
            held.num_cached = num_hit
        if num_new:
            new = self._pop(num_new)
            self._evict(new)
            blocks = np.concatenate((blocks, new))
        held.blocks, held.num_computed_tokens = blocks, total
        num_full = total // bs
        if num_full > held.num_cached:
            if num_full > len(held.ids):  # decoded tokens filled blocks: their ids
                held.ids = self.memo.ids(req.all_ids[:num_full * bs], held.ns, num_full,
                                         req.extra_key, req.cache_salt, held.walk)
                held.walk = self.memo.walk
                self._grow(self.memo.count)
            self._store(blocks, held.ids, held.num_cached, num_full)
            held.num_cached = num_full
        return num_new

    def release(self, req: Req) -> None:
        """BlockCacheManager.free: hashed blocks to the queue's tail (last first), unhashed
        ones to its front."""
        held = self.requests.pop(req.rid, None)
        if held is not None and len(held.blocks):
            self._release(held.blocks, held.num_cached)

    def reserve(self, n: int) -> None:
        raise UnsupportedByStorage("an ArrayPool takes no prepaid blocks (reserve_blocks)")

    def last_eviction(self, *args: Any) -> None:
        raise UnsupportedByStorage("an ArrayPool keeps no eviction marks")

    # ------------------------------------------------------------------ looks inside
    def num_unreachable_blocks(self) -> int:
        """Cached blocks whose chain has a gap before them (as snapshot.py defines them): the
        hash of the first block carrying each id is reachable at chain position 0, or when
        its parent's is.

        >>> ArrayPool(4).num_unreachable_blocks()
        0
        """
        cached = np.flatnonzero(self.pos >= 0)
        hs = self.hid[cached]
        heads = cached[self.first[hs] == cached]
        heads = heads[np.argsort(self.pos[heads], kind="stable")]  # parents first
        reachable: set[int] = set()
        add = reachable.add
        for h, p, pos in zip(self.hid[heads].tolist(), self.parent[heads].tolist(),
                             self.pos[heads].tolist(), strict=True):
            if pos == 0 or p in reachable:
                add(h)
        ok = np.zeros(self.memo.count, bool)
        ok[list(reachable)] = True
        return int((~ok[hs]).sum())

    def check_invariants(self) -> None:
        """Raises AssertionError unless: the log's live entries are the free blocks, each once,
        and num_free counts them; a block is cached iff it has a hash id; the hash map names
        a block carrying each id, and every cached block's id is in it; the live request's
        blocks are out of the queue."""
        free = np.flatnonzero(self.where >= 0)
        assert len(self.queue()) == len(free) == self.num_free, "free count"
        assert (self.log[self.where[free]] == free).all(), "a free block's log entry"
        assert ((self.pos >= 0) == (self.hid >= 0)).all(), "cached iff hashed"
        ids = np.flatnonzero(self.first[:self.memo.count] >= 0)
        assert (self.hid[self.first[ids]] == ids).all(), "the hash map names a carrier"
        assert (self.first[self.hid[self.pos >= 0]] >= 0).all(), "a cached id is mapped"
        for held in self.requests.values():
            assert (self.where[held.blocks] < 0).all(), "a held block is free"

    # ------------------------------------------------------------------ keyframes
    def capture(self) -> bytes:
        """scenarios/blockframes.py capture of the BlockPool this pool stands for, byte for
        byte (between requests: a replay holds no block after it)."""
        return self.frame().capture()

    def frame(self) -> Frame:
        """The pool as it is now, its blocks' hashes still ids: `capture()` later."""
        cached = np.flatnonzero(self.pos >= 0)
        hs = self.hid[cached]
        # the hash map's entries: each hash once, at its first block, in the order they entered
        heads = cached[self.first[hs] == cached]
        # (the entry counts are distinct and nearly in order: a stable sort, a merge, is the
        # fastest, ~2.5x numpy's default on the conversation stand-in's 62,500 blocks)
        present = self.hid[heads][np.argsort(self.entered[self.hid[heads]], kind="stable")]
        shared = {k: list(self.groups[h]) for k, h in enumerate(present.tolist())
                  if self.shared[h]} if self.groups else {}
        return Frame(self.num_blocks, self.block_size, self.pos.astype(np.int32), hs,
                     self.parent[self.pos > 0], self.queue().astype(np.int32),
                     self.first[present].astype(np.int32), shared, self.num_evictions,
                     self.memo.hashes)


class Frame:
    """A keyframe of an ArrayPool before its hashes are read: the arrays `capture` packs,
    hashes as ids (`hashes` computes them). A keyframe is restored only when a step in it is
    shown, so a replay that takes one every `every` requests hashes only those shown.
    `nbytes`: what it holds (not counting `hashes`, which its replay's keyframes share)."""

    def __init__(self, num_blocks: int, block_size: int, pos: np.ndarray, hs: np.ndarray,
                 parents: np.ndarray, queue: np.ndarray, entries: np.ndarray,
                 shared: dict[int, list[int]], num_evictions: int,
                 hashes: BlockHashes) -> None:
        self.num_blocks, self.block_size, self.num_evictions = num_blocks, block_size, \
            num_evictions
        self.pos = pos  # each block's chain position, -1: not cached
        self.hs, self.parents = hs, parents  # ids: cached blocks', blocks past position 0's
        self.queue, self.entries = queue, entries  # free queue, hash map (by first block)
        self.shared = shared  # entry index -> the blocks carrying its hash, first cached first
        self.hashes = hashes
        self.nbytes = sum(a.nbytes for a in (pos, hs, parents, queue, entries)) + 64 * sum(
            map(len, shared.values()))

    def capture(self) -> bytes:
        """scenarios/blockframes.py capture of the pool, byte for byte: the cached blocks'
        hashes (and those of parents no longer cached) computed now."""
        hs, parents = self.hs, self.parents
        if len(hs):
            width: int = WIDTH
            # each parent as 1 + the last cached block (by id) carrying it, else lost
            order = np.argsort(hs, kind="stable")
            ranked = hs[order]
            at = np.searchsorted(ranked, parents, side="right") - 1
            ok = at >= 0
            ok[ok] = ranked[at[ok]] == parents[ok]
            index = np.where(ok, order[np.maximum(at, 0)] + 1, 0).tolist()
            refs = [k or None for k in index]
            data = self.hashes.of(np.concatenate((hs, parents[~ok])))  # one pass: shared parents
            cut = WIDTH * len(hs)
            hashes: bytes | list = data[:cut]
            lost: bytes | list = data[cut:]
        else:
            width, hashes, refs, lost = 0, [], [], []
        entries: list = self.entries.tolist()
        for k, blocks in self.shared.items():
            entries[k] = list(blocks)
        state = (self.num_blocks, self.block_size, True, self.pos.tolist(), width, hashes, refs,
                 lost, self.queue.tolist(), entries, self.num_evictions, 0)
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
