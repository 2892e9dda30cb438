"""A KV block and vLLM's free block queue: a doubly linked list threaded through the blocks.

Follows vLLM's kv_cache_utils.FreeKVCacheBlockQueue: fake head and tail sentinels, O(1) popleft,
append and remove of any block (a cache hit pulls a block out of the middle), no allocation per
operation. Extras for diagnostics: a block remembers its parent hash and chain position.
Leaves out: vLLM's BlockHashWithGroupId (one cache group here).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


class KVCacheBlock:
    """One block of `block_size` KV slots. `block_hash` is set only while it is cached."""

    __slots__ = ("block_id", "ref_cnt", "block_hash", "parent_hash", "chain_pos", "is_null",
                 "prev_free_block", "next_free_block")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0  # requests holding this block
        self.block_hash: bytes | None = None  # set when full and cached
        self.parent_hash: bytes | None = None  # hash of the block before it in its chain
        self.chain_pos = -1  # index of the block in its chain (0: first block); -1 uncached
        self.is_null = False
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash else None
        return f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, block_hash={h})"


class FreeKVCacheBlockQueue:
    """Free blocks in eviction order: the head is taken (and evicted) first.

    >>> q = FreeKVCacheBlockQueue([KVCacheBlock(i) for i in range(4)])
    >>> b = q.popleft(); q.append(b); [x.block_id for x in q]
    [1, 2, 3, 0]
    """

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.num_free_blocks = 0
        self.fake_head = KVCacheBlock(-1)
        self.fake_tail = KVCacheBlock(-2)
        self.fake_head.next_free_block = self.fake_tail
        self.fake_tail.prev_free_block = self.fake_head
        self.append_n(blocks)

    def popleft(self) -> KVCacheBlock:
        block = self.fake_head.next_free_block
        if block is self.fake_tail:
            raise ValueError("no free blocks")
        self.remove(block)
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """The first `n` blocks, unlinked in one splice."""
        if n > self.num_free_blocks:
            raise ValueError(f"asked for {n} blocks, {self.num_free_blocks} free")
        out = []
        block = self.fake_head.next_free_block
        for _ in range(n):
            out.append(block)
            nxt = block.next_free_block
            block.prev_free_block = block.next_free_block = None
            block = nxt
        self.fake_head.next_free_block = block
        block.prev_free_block = self.fake_head
        self.num_free_blocks -= n
        return out

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise ValueError(f"block {block.block_id} is not in the free queue")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        self.append_n((block,))

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Links `blocks` at the tail, in order (the first of them is evicted first)."""
        prev = self.fake_tail.prev_free_block
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = self.fake_tail
        self.fake_tail.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Links `blocks` at the head, in order: blocks[0] becomes the new head."""
        nxt = self.fake_head.next_free_block
        prev = self.fake_head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def release(self, blocks: Iterable[KVCacheBlock],
                null_block: KVCacheBlock | None = None) -> list[KVCacheBlock]:
        """Drops one reference from each block; a block left with none joins the queue: a hashed
        (cached) one at the tail, in the order given, so it stays findable until it is evicted;
        an unhashed one goes to the head (returned, in order, and linked there). `null_block` is
        skipped (it is never pooled). One pass: this is the end of every request.

        >>> q = FreeKVCacheBlockQueue([]); a, b = KVCacheBlock(1), KVCacheBlock(2)
        >>> a.ref_cnt = b.ref_cnt = 1; a.block_hash = b"h"
        >>> [x.block_id for x in q.release([a, b])], [x.block_id for x in q]
        ([2], [2, 1])
        """
        sentinel = self.fake_tail
        prev = sentinel.prev_free_block
        front: list[KVCacheBlock] = []
        n = 0
        for block in blocks:
            # one read of ref_cnt, and the usual 1 -> 0 stores a constant (this loop is the
            # cost of a free; a block is usually shared, ref_cnt > 1, or dropping to 0)
            ref_cnt = block.ref_cnt
            if ref_cnt != 1:
                if ref_cnt:
                    block.ref_cnt = ref_cnt - 1
                elif block is not null_block:
                    block.ref_cnt = -1  # freed once too often: kept visible, as vLLM's -= 1
                continue
            # subtle: the null block is recognised at ref_cnt 0 only; it never holds more
            # (touch skips it, get_new_blocks never hands it out)
            block.ref_cnt = 0
            if block.block_hash is None:
                front.append(block)
                continue
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
            n += 1
        prev.next_free_block = sentinel
        sentinel.prev_free_block = prev
        self.num_free_blocks += n
        if front:
            self.prepend_n(front)
        return front

    def __iter__(self) -> Iterator[KVCacheBlock]:
        block = self.fake_head.next_free_block
        while block is not self.fake_tail:
            yield block
            block = block.next_free_block

    def check_invariants(self) -> None:
        """Links agree both ways and the count matches."""
        seen = 0
        prev = self.fake_head
        block = prev.next_free_block
        while block is not None and block is not self.fake_tail:
            assert block.prev_free_block is prev, f"block {block.block_id}: broken prev link"
            prev, block = block, block.next_free_block
            seen += 1
            assert seen <= self.num_free_blocks, "free queue longer than num_free_blocks"
        assert block is self.fake_tail and self.fake_tail.prev_free_block is prev, "broken tail"
        assert seen == self.num_free_blocks, f"free queue has {seen}, count {self.num_free_blocks}"
