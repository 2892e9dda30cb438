"""Block hashes as ints for the array pool (blockbuilder.py): ids from a prefix trie, hashed late.

A block hash stands for its block's prefix (namespace, tokens up to the block's end), so each
distinct prefix gets an int, its id, when first met (`HashIds`, on radix/tokens/runs.py's
PrefixTrie, as HashMemo uses it: a trie node's blocks have consecutive ids): equal ids are equal
hashes, and a replay hashes nothing. The 32-byte hashes are computed when a keyframe reads them,
only for the blocks it holds (`BlockHashes`; hashing every new block was a third of the replay).
`pack_runs` packs a compact prompt's tokens for hashing, here and in the BlockCacheManager a
keyframe is restored into (blockframes.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from radix.blocks.hashing import BlockHasher, hash_request_tokens
from radix.tokens import TokenRuns
from radix.tokens.runs import PrefixTrie, Walk

WIDTH = 32  # a block hash: a sha256 digest, in every hash_algo
SEGMENT_BYTES = 600  # a segment of ids: its compact sequence and entry (~580 measured on the
#                      conversation stand-in); a request brings at most two (prompt, reply)


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
        """What it holds, roughly: SEGMENT_BYTES a segment, the table's rows hashed."""
        return SEGMENT_BYTES * len(self._segs) + self._table[:self.count].nbytes * self.keep

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
