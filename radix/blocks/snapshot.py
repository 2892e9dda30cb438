"""Plain-data pictures of a BlockPool for drawing, and the diagnostics vLLM does not offer.

Shape: `BlockPoolSnapshot(blocks, block_size, num_blocks, num_free, num_cached, num_unreachable,
step)`; `blocks[i]` describes block i + 1 (the null block 0 is left out) as `BlockState(id,
state, ref_cnt, hash, chain_pos, parent, free_pos, owners, parent_hash)`: state is "in_use"
(ref_cnt > 0), "cached_free" (ref_cnt 0, hashed, reachable), "unreachable" (ref_cnt 0, hashed,
an ancestor's hash is no longer cached: no lookup can reach it) or "free" (no hash); hashes are
the low 64 bits; parent is the first block cached under the parent hash (parent_hash: that hash,
even when no block carries it any more); free_pos is 0 at the head.
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

from radix.blocks.hashing import _LOW64
from radix.blocks.pool import BlockPool, KVCacheBlock

_CHAIN_POS = attrgetter("chain_pos")


class BlockState(NamedTuple):
    id: int
    state: str  # "in_use" | "cached_free" | "unreachable" | "free"
    ref_cnt: int
    hash: int | None  # low 64 bits of block_hash; None when not cached
    chain_pos: int | None  # index in its chain (0: a first block); None when not cached
    parent: int | None  # block id cached under the parent hash; None at chain start or if gone
    free_pos: int | None  # place in the free queue (0 = taken next); None when in use
    owners: tuple[str, ...]  # rids of the live requests holding it
    parent_hash: int | None = None  # low 64 bits of the parent block's hash; None at chain start


class BlockPoolSnapshot(NamedTuple):
    blocks: tuple[BlockState, ...]  # blocks 1..num_blocks-1, by id
    block_size: int
    num_blocks: int  # including the null block
    num_free: int  # blocks in the free queue (cached_free + unreachable + free)
    num_cached: int  # blocks carrying a hash (in use or not)
    num_unreachable: int
    step: int  # the pool's step counter when taken


def reachable_hashes(pool: BlockPool) -> set[bytes]:
    """Hashes a lookup could reach: chain position 0, or the parent hash is reachable.

    >>> from radix.blocks.pool import BlockPool; reachable_hashes(BlockPool(2))
    set()
    """
    firsts = [e if type(e) is KVCacheBlock else next(iter(e.values()))
              for e in pool.cached_block_hash_to_block.values()]  # get_cached_block, inlined
    firsts.sort(key=_CHAIN_POS)
    reachable: set[bytes] = set()
    add = reachable.add
    for block in firsts:  # parents come before children: a chain position is one more
        if block.chain_pos == 0 or block.parent_hash in reachable:
            add(block.block_hash)
    return reachable


def unreachable_block_ids(pool: BlockPool) -> list[int]:
    """Ids of cached blocks whose chain is broken above them (they only wait to be reused).

    >>> from radix.blocks.pool import BlockPool; unreachable_block_ids(BlockPool(2))
    []
    """
    reachable = reachable_hashes(pool)
    return [b.block_id for b in pool.blocks
            if b.block_hash is not None and b.block_hash not in reachable]


def take_snapshot(pool: BlockPool, owners: dict[int, list[str]], step: int) -> BlockPoolSnapshot:
    """The pool as plain data; `owners` maps block id -> rids holding it.

    >>> from radix.blocks.pool import BlockPool; s = take_snapshot(BlockPool(3), {}, 0)
    >>> [(b.id, b.state, b.free_pos) for b in s.blocks]
    [(1, 'free', 0), (2, 'free', 1)]
    """
    # one pass over every block (~62,500 for a 1 M-token pool: a slider jump's snapshot), so
    # the per-block work is inlined: get_cached_block, hash_to_int64 (each hash's once: a
    # parent's hash is its parent block's), BlockState built as the tuple it is
    reachable = reachable_hashes(pool)
    free_pos = {b.block_id: i for i, b in enumerate(pool.free_block_queue)}
    cache = pool.cached_block_hash_to_block
    low = {}  # hash -> its low 64 bits
    make, from_bytes, mask = tuple.__new__, int.from_bytes, _LOW64
    at, owned, none = free_pos.get, owners.get, ()
    states = []
    append = states.append
    num_cached = num_unreachable = 0
    for block in pool.blocks[1:]:
        h, i = block.block_hash, block.block_id
        if h is None:
            append(make(BlockState, (i, "in_use" if block.ref_cnt > 0 else "free",
                                     block.ref_cnt, None, None, None, at(i),
                                     tuple(owned(i, none)), None)))
            continue
        num_cached += 1
        if block.ref_cnt > 0:
            state = "in_use"
            if h not in reachable:
                num_unreachable += 1
        elif h in reachable:
            state = "cached_free"
        else:
            state = "unreachable"
            num_unreachable += 1
        x = low.get(h)
        if x is None:
            x = low[h] = from_bytes(h[-8:], "big") & mask
        ph = block.parent_hash
        parent = px = None
        if ph is not None:
            e = cache.get(ph)
            if e is not None:
                parent = (e if type(e) is KVCacheBlock else next(iter(e.values()))).block_id
            px = low.get(ph)
            if px is None:
                px = low[ph] = from_bytes(ph[-8:], "big") & mask
        append(make(BlockState, (i, state, block.ref_cnt, x, block.chain_pos, parent, at(i),
                                 tuple(owned(i, none)), px)))
    return BlockPoolSnapshot(tuple(states), pool.block_size, pool.num_blocks, len(free_pos),
                             num_cached, num_unreachable, step)
