"""A BlockPool's whole state as plain data, for tests that hold two pools equal (a keyframe
restored against the pool it was taken from)."""

from __future__ import annotations

from radix.blocks.manager import BlockCacheManager


def pool_state(m: BlockCacheManager) -> tuple:
    """Blocks (id, hash, parent hash, chain position, ref_cnt), the free queue's ids in order,
    the hash map in its order (one id, or every id of a hash two blocks carry) and the eviction
    count."""
    pool = m.pool
    table = [(h, e.block_id if not isinstance(e, dict) else list(e))
             for h, e in pool.cached_block_hash_to_block.items()]
    blocks = [(b.block_id, b.block_hash, b.parent_hash, b.chain_pos, b.ref_cnt)
              for b in pool.blocks]
    return blocks, [b.block_id for b in pool.free_block_queue], table, pool.num_evictions
