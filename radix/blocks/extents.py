"""Moved: the block-extent storage is `ExtentPool` in radix/blocks/manager.py, driven by
BlockCacheManager like a BlockPool. These two names stay only for scenarios/blockframes.py (a
branch that edits it is open); delete this file once it builds BlockCacheManager(ExtentPool(..)).
"""

from __future__ import annotations

from radix.blocks.manager import BlockCacheManager, ComputedBlocks, ExtentPool

ExtentHit = ComputedBlocks


def ExtentBlockManager(num_blocks: int, block_size: int = 16) -> BlockCacheManager:  # noqa: N802
    """BlockCacheManager(ExtentPool(num_blocks, block_size)), under its old name."""
    return BlockCacheManager(ExtentPool(num_blocks, block_size))
