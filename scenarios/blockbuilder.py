"""The keyframe builder's block pool as numpy arrays: run_blocks' flow (radix/runs/compare.py),
its keyframes byte for byte what `capture` takes of a BlockPool that ran the same requests.

BlockFrames (blockframes.py) replays a whole trace once, request by request, to keep its
keyframes. Per block, in Python, that was ~17 s of the 12,031-request conversation stand-in: a
pop, an eviction, a store, a release for every one of ~3.5 M blocks. Here a request costs a few
numpy operations over its block ids, whatever its length:
- a hash is an int, its id: each distinct block prefix (namespace, tokens up to the block's end)
  gets one when first hashed, from a prefix trie of the tokens (radix/tokens/runs.py PrefixTrie,
  as HashMemo uses it: a node's blocks have consecutive ids), so equal ids are equal hashes; a
  replay hashes nothing: the 32-byte hashes are computed when a keyframe reads them, only for
  the blocks it holds (BlockHashes; hashing every new block was a third of the replay);
- the hash map is an array by id (the first block cached under it, -1: none) with the order
  each id entered it (a dict's order); a hash on several blocks (a fully cached prompt
  recomputes its last block) is kept apart, in a dict of lists, as BlockPool does;
- the free queue is a log of block ids with each free block's place in it: a hit or a pop
  leaves a stale entry behind (skipped when the head passes it), a release writes at the tail
  (hashed blocks) or just before the head (the unhashed), and the log is compacted when full.
Only for a fresh pool with caching on and no event sink, one request at a time (the builder's).
`pack_runs` packs a compact prompt's tokens for hashing, here and in the BlockCacheManager a
keyframe is restored into (blockframes.py), which replays the requests between keyframes.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Sequence

import numpy as np

from radix.blocks.hashing import BlockHasher, hash_request_tokens
from radix.request import Req
from radix.runs.compare import decode_tokens
from radix.tokens import TokenRuns
from radix.tokens.runs import PrefixTrie, Walk

WIDTH = 32  # a block hash: a sha256 digest, in every hash_algo


def pack_runs(tokens: Sequence[int]) -> bytes | None:
    """A TokenRuns as little-endian int64s, the bytes struct.pack gives, built by numpy run by
    run (a Mooncake prompt: runs of 512; expanding it into ints to pack cost a tenth of the
    block replay), or None: not a TokenRuns, or a token past int64. hash_request_tokens'
    `pack` (radix/blocks/hashing.py), which radix/ cannot build without numpy.
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


class BlockHashes:
    """The hash of each id HashIds hands out, computed only when asked for (`of(ids)`): the
    ids come from the trie, and a replay needs only them (equal ids, equal hashes); the 32-byte
    hashes are read only when a keyframe is taken, and of a keyframe only its cached blocks'.

    Ids are handed out in segments, one per sequence that brought new blocks: ids [start,
    start + n) are blocks pos..pos + n - 1 of `tokens`, whose block pos - 1 (if any) has id
    `parent`. A segment is hashed from its start up to the furthest block asked for so far
    (hash_request_tokens from its parent's hash: the same hashes as hashing the whole sequence),
    its parent's segment first. `keep`: remember the hashes (a table by id: its rows are
    written only as hashed), else each `of` call hashes what it needs afresh.

    >>> b = BlockHashes(BlockHasher(), 2)
    >>> b.add(0, 2, [1, 2, 3, 4], 0, -1, None, None); b.add(2, 1, [1, 2, 5, 6], 1, 0, None, None)
    >>> b.of([2]) == hash_request_tokens([1, 2, 5, 6], 2)[1], b.count
    (True, 3)
    """

    def __init__(self, hasher: BlockHasher, block_size: int, keep: bool = True) -> None:
        self.hasher, self.block_size, self.keep = hasher, block_size, keep
        self.count = 0  # ids handed out
        self._starts: list[int] = []  # each segment's first id
        self._segs: list[tuple] = []  # (tokens, pos, parent id, extra_key, cache_salt)
        self._table = np.zeros((0, WIDTH), np.uint8)  # row k: the hash of id k, once hashed
        self._done = np.zeros(0, np.int64)  # blocks of each segment hashed into the table

    def add(self, start: int, n: int, tokens: Sequence[int], pos: int, parent: int,
            extra_key: str | None, cache_salt: str | None) -> None:
        """Ids start..start + n - 1 (start: the ids handed out so far) are blocks pos.. of
        `tokens`, block pos - 1's id `parent` (-1: pos is 0)."""
        if start != self.count:
            raise ValueError(f"segment at id {start}, but {self.count} ids are handed out")
        self._starts.append(start)
        self._segs.append((tokens, pos, parent, extra_key, cache_salt))
        self.count = start + n

    @property
    def nbytes(self) -> int:
        """What it holds, roughly: ~600 bytes a segment (a compact sequence and its entry,
        ~580 measured on the conversation stand-in), the table's rows hashed."""
        return 600 * len(self._segs) + self._table[:self.count].nbytes * self.keep

    def forget(self) -> None:
        """Keep no hashes from now on: each `of` hashes what it needs afresh."""
        self.keep = False
        self._table, self._done = np.zeros((0, WIDTH), np.uint8), np.zeros(0, np.int64)

    def of(self, ids: Sequence[int] | np.ndarray) -> bytes:
        """The hashes of `ids`, 32 bytes each, in order."""
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return b""
        if len(self._done) < len(self._segs) or len(self._table) < self.count:
            self._grow()
        starts = np.asarray(self._starts, np.int64)
        seg = np.searchsorted(starts, ids, side="right") - 1
        off = ids - starts[seg]
        need = off >= self._done[seg]
        if need.any():
            segs, inv = np.unique(seg[need], return_inverse=True)
            top = np.zeros(len(segs), np.int64)
            np.maximum.at(top, inv, off[need])
            for s, o in zip(segs.tolist(), top.tolist(), strict=True):
                self._hash(s, o, starts)
        out = self._table[ids].tobytes()
        if not self.keep:
            self._table, self._done = np.zeros((0, WIDTH), np.uint8), np.zeros(0, np.int64)
        return out

    def _grow(self) -> None:
        table = np.zeros((max(self.count, 2 * len(self._table)), WIDTH), np.uint8)
        table[:len(self._table)] = self._table
        done = np.zeros(max(len(self._segs), 2 * len(self._done)), np.int64)
        done[:len(self._done)] = self._done
        self._table, self._done = table, done

    def _hash(self, s: int, o: int, starts: np.ndarray) -> None:
        """Blocks up to offset `o` of segment `s` into the table, its parents' first."""
        table, done, bs = self._table, self._done, self.block_size
        todo = [(s, o)]
        while todo:
            s, o = todo[-1]
            have = int(done[s])
            if have > o:
                todo.pop()
                continue
            tokens, pos, parent, extra_key, cache_salt = self._segs[s]
            if have:
                last = table[starts[s] + have - 1].tobytes()
            elif parent >= 0:
                p = int(np.searchsorted(starts, parent, side="right")) - 1
                if parent - starts[p] >= done[p]:
                    todo.append((p, int(parent - starts[p])))
                    continue
                last = table[parent].tobytes()
            else:
                last = None
            first = pos + have  # the first block to hash
            known: list = [None] * (first - 1) + [last] if first else []
            fresh = hash_request_tokens(tokens[:(pos + o + 1) * bs], bs, extra_key, cache_salt,
                                        known, self.hasher, pack_runs)[first:]
            data = b"".join(fresh)
            if len(data) != WIDTH * len(fresh):
                raise ValueError("a block hash is not 32 bytes")
            at = starts[s] + have
            table[at:at + len(fresh)] = np.frombuffer(data, np.uint8).reshape(-1, WIDTH)
            done[s] = have + len(fresh)
            todo.pop()


class HashIds:
    """Each distinct full-block prefix of the token sequences seen, per namespace, as an int
    (its hash's id): `ids(tokens, ns, num_full, extra_key, cache_salt)` walks and extends a
    prefix trie (as HashMemo does) and hashes nothing: `hashes` (BlockHashes) hashes an id
    when it is asked for.

    >>> h = HashIds(BlockHasher(), 2); a = h.ids([1, 2, 3, 4], (None, None), 2, None, None)
    >>> a.tolist(), h.ids([1, 2, 5, 6], (None, None), 2, None, None).tolist()
    ([0, 1], [0, 2])
    >>> from radix.blocks.hashing import hash_request_tokens
    >>> h.hash(2) == hash_request_tokens([1, 2, 5, 6], 2)[1]
    True
    """

    def __init__(self, hasher: BlockHasher, block_size: int) -> None:
        self.hasher, self.block_size = hasher, block_size
        self.trie = PrefixTrie(unit=block_size)
        self._base: dict[int, int] = {}  # id(trie node) -> the id of its block d0
        self.hashes = BlockHashes(hasher, block_size)

    @property
    def count(self) -> int:
        """Ids handed out (ids are 0..count - 1)."""
        return self.hashes.count

    def hash(self, k: int) -> bytes:
        return self.hashes.of([k])

    def ids(self, tokens: Sequence[int], ns: Hashable, num_full: int, extra_key: str | None,
            cache_salt: str | None, resume: Walk | None = None) -> np.ndarray:
        """The ids of the first `num_full` blocks of `tokens` (which hold no more than that);
        `self.walk` is left covering them (to resume a longer walk of the same sequence)."""
        trie = self.trie
        walk = trie.walk(tokens, ns, num_full, resume)
        pos = walk.pos
        if pos < num_full:
            start = self.count
            parent = self._id(walk, pos - 1) if pos else -1
            self.hashes.add(start, num_full - pos, tokens, pos, parent, extra_key, cache_salt)
            walk = trie.insert(tokens, ns, num_full, None, walk)
            node = walk.pieces[-1][0]
            self._base[id(node)] = start - node.d0
        self.walk = walk
        base = self._base
        parts = [np.arange(base[id(n)] + lo, base[id(n)] + hi) for n, lo, hi in walk.pieces]
        if not parts:
            return np.zeros(0, np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _id(self, walk: Walk, block: int) -> int:
        node = walk.pieces[-1][0]
        return self._base[id(node)] + block


class ArrayPool:
    """A BlockPool of `num_blocks` (block 0: the null block) replayed by `replay(pairs)` as
    run_blocks runs one (fresh Reqs, their outputs: each looked up, admitted or rejected,
    decoded, freed); `capture()` is scenarios/blockframes.py capture of that pool.

    >>> from radix.blocks.manager import BlockCacheManager
    >>> from radix.blocks.pool import BlockPool
    >>> from radix.runs.compare import run_blocks
    >>> from scenarios.blockframes import capture
    >>> a, m = ArrayPool(4, 2), BlockCacheManager(BlockPool(4, 2))
    >>> reqs = lambda: [(Req("x", [1, 2, 3, 4, 5]), [7, 8]), (Req("y", [1, 2, 9]), [6])]
    >>> a.replay(reqs()); _ = run_blocks(*zip(*reqs()), 8, 2, manager=m)
    >>> a.capture() == capture(m), a.num_evictions
    (True, 1)
    """

    def __init__(self, num_blocks: int, block_size: int = 16,
                 hash_algo: str | BlockHasher = "radixlens") -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (block 0 is null), got {num_blocks}")
        self.num_blocks, self.block_size = num_blocks, block_size
        hasher = hash_algo if isinstance(hash_algo, BlockHasher) else BlockHasher(hash_algo)
        self.memo = HashIds(hasher, block_size)  # the ids and the hashes
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

    # ------------------------------------------------------------------ requests
    def replay(self, pairs: Sequence[tuple[Req, Sequence[int]]]) -> None:
        """The requests of `pairs` one at a time, as run_blocks runs them."""
        bs, memo = self.block_size, self.memo
        for req, out in pairs:
            tokens = req.all_ids
            ns = (req.extra_key or None, req.cache_salt or None)
            prompt_len = len(req.origin_input_ids)
            num_cached = prompt_len // bs
            ids = memo.ids(tokens, ns, num_cached, req.extra_key, req.cache_salt)
            walk = memo.walk
            self._grow(memo.count)
            max_blocks = (prompt_len - 1) // bs if prompt_len else 0
            found = self.first[ids[:max_blocks]]
            miss = np.flatnonzero(found < 0)
            num_hits = int(miss[0]) if len(miss) else max_blocks
            num_new = -(-prompt_len // bs) - num_hits
            if num_new + num_hits > self.num_free:
                continue  # rejected: nothing changes
            hits = found[:num_hits]
            self.where[hits] = -1  # out of the queue (the log entries go stale)
            self.num_free -= num_hits
            if num_new:
                new = self._pop(num_new)
                self._evict(new)
                blocks = np.concatenate((hits, new))
            else:
                blocks = hits
            self._store(blocks, ids, num_hits, num_cached)
            num = decode_tokens(req, out, len(blocks), self.num_free, bs)
            if num:  # its blocks fit: the tokens run are those the held and free blocks hold
                total = prompt_len + num
                more, num_full = -(-total // bs) - len(blocks), total // bs
                if more:
                    new = self._pop(more)
                    self._evict(new)
                    blocks = np.concatenate((blocks, new))
                if num_full > num_cached:
                    tokens = req.all_ids[:num_full * bs]
                    ids = memo.ids(tokens, ns, num_full, req.extra_key, req.cache_salt, walk)
                    self._grow(memo.count)
                    self._store(blocks, ids, num_cached, num_full)
                    num_cached = num_full
            self._release(blocks, num_cached)

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
        present = self.hid[heads][np.argsort(self.entered[self.hid[heads]])]
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
