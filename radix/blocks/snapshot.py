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

from typing import NamedTuple

from radix.blocks.hashing import hash_to_int64
from radix.blocks.pool import BlockPool


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
    firsts = sorted((pool.get_cached_block(h) for h in pool.cached_block_hash_to_block),
                    key=lambda b: b.chain_pos)
    reachable: set[bytes] = set()
    for block in firsts:  # parents come before children: a chain position is one more
        if block.chain_pos == 0 or block.parent_hash in reachable:
            reachable.add(block.block_hash)
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
    reachable = reachable_hashes(pool)
    free_pos = {b.block_id: i for i, b in enumerate(pool.free_block_queue)}
    cache = pool.cached_block_hash_to_block
    states = []
    for block in pool.blocks[1:]:
        h = block.block_hash
        if block.ref_cnt > 0:
            state = "in_use"
        elif h is None:
            state = "free"
        else:
            state = "cached_free" if h in reachable else "unreachable"
        parent = None
        if h is not None and block.parent_hash is not None and block.parent_hash in cache:
            parent = pool.get_cached_block(block.parent_hash).block_id
        states.append(BlockState(
            block.block_id, state, block.ref_cnt, None if h is None else hash_to_int64(h),
            None if h is None else block.chain_pos, parent, free_pos.get(block.block_id),
            tuple(owners.get(block.block_id, ())),
            None if h is None or block.parent_hash is None else hash_to_int64(block.parent_hash)))
    num_unreachable = sum(1 for s in states if s.state == "unreachable")
    num_unreachable += sum(1 for s in states if s.state == "in_use" and s.hash is not None
                           and pool.blocks[s.id].block_hash not in reachable)
    return BlockPoolSnapshot(tuple(states), pool.block_size, pool.num_blocks, len(free_pos),
                             sum(1 for s in states if s.hash is not None), num_unreachable, step)
