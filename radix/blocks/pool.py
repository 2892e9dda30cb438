"""vLLM v1's block pool: KV blocks, the free queue, and the hash -> block map (block_pool.py).

Follows vLLM: block 0 is the null block, never handed out; the free queue is a doubly linked list,
first in block-id order; allocation pops from the head and evicts the popped block's hash then
(lazily, `BlockRemoved`); a hit `touch`es a block (out of the queue when its ref_cnt was 0);
`free_blocks` sends blocks without a hash to the front and hashed ones to the tail, in the order
given (vLLM #42656). Several blocks may carry one hash; lookups take the first cached. The queue
(`FreeKVCacheBlockQueue`, first below, after vLLM's kv_cache_utils) is threaded through the
blocks: fake head and tail sentinels, O(1) popleft, append and remove of any block (a hit pulls
a block out of the middle), no allocation per operation; a block also remembers its parent hash
and chain position, for diagnostics.
With enable_kv_cache_events, the KV events are also kept for `take_events()`, as vLLM's pool.
Leaves out: KV cache groups (hybrid models; vLLM's BlockHashWithGroupId), block bundles,
offloading. UI events: below; `snapshot()` shape: radix/blocks/snapshot.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from radix.blocks.hashing import BlockHash, BlockHasher, hash_to_int64
from radix.blocks.kv_events import MEDIUM_GPU
from radix.events import (
    AllBlocksCleared,
    BlockAllocated,
    BlockFreed,
    BlockRemoved,
    BlockStored,
    BlockTouched,
    EventSink,
    StepEnded,
    StepStarted,
)


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


_KV_EVENT_TYPES = (BlockStored, BlockRemoved, AllBlocksCleared)


class _KVEventBuffer:
    """A sink that keeps the KV cache events for take_events and passes every event on."""

    __slots__ = ("events", "inner")

    def __init__(self, inner: EventSink | None) -> None:
        self.events: list = []
        self.inner = inner

    def emit(self, event) -> None:
        if type(event) in _KV_EVENT_TYPES:
            self.events.append(event)
        if self.inner is not None:
            self.inner.emit(event)


__all__ = ["BlockPool", "KVCacheBlock", "FreeKVCacheBlockQueue", "BlockAllocated",
           "BlockTouched", "BlockFreed"]


class BlockPool:
    """Blocks 1..num_blocks-1 for requests; block 0 is the null block.

    >>> pool = BlockPool(4); [b.block_id for b in pool.get_new_blocks(2)]
    [1, 2]
    >>> pool.get_num_free_blocks()
    1
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        enable_caching: bool = True,
        sink: EventSink | None = None,
        enable_kv_cache_events: bool = False,
        hash_algo: str | BlockHasher = "radixlens",
    ) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (block 0 is null), got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # hash -> its block, or {block_id: block} while several blocks carry it (vLLM's
        # BlockHashToBlockMap: one dict per hash only when needed); dict order = first cached.
        self.cached_block_hash_to_block: dict[BlockHash, KVCacheBlock | dict[int, KVCacheBlock]]
        self.cached_block_hash_to_block = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        # how the manager hashes blocks for this pool (radix/blocks/hashing.py)
        self.hasher = hash_algo if isinstance(hash_algo, BlockHasher) else BlockHasher(hash_algo)
        # vLLM's enable_kv_cache_events: KV events are also kept for take_events()
        self._kv_buffer = _KVEventBuffer(sink) if enable_kv_cache_events else None
        self._sink = self._kv_buffer or sink
        self._step = 0  # index of the next public call (for StepStarted)
        self._depth = 0  # nesting: a manager call wraps pool calls in one step
        self.num_evictions = 0  # cached blocks whose hash was dropped to reuse the block

    # --- steps ---------------------------------------------------------------------------------
    def begin_step(self, op: str, rid: str | None = None, detail: str = "") -> None:
        """Opens a step unless one is open (only called when there is a sink)."""
        self._depth += 1
        if self._depth == 1:
            self._sink.emit(StepStarted(self._step, op, rid, detail))

    def end_step(self, op: str) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._sink.emit(StepEnded(self._step, op))
            self._step += 1

    # --- lookups -------------------------------------------------------------------------------
    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """The first block cached under `block_hash`, or None. Changes nothing."""
        entry = self.cached_block_hash_to_block.get(block_hash)
        if entry is None or type(entry) is KVCacheBlock:
            return entry
        return next(iter(entry.values()))

    def cached_blocks(self, block_hash: BlockHash) -> list[KVCacheBlock]:
        """Every block carrying `block_hash`, first cached first."""
        entry = self.cached_block_hash_to_block.get(block_hash)
        if entry is None:
            return []
        return [entry] if type(entry) is KVCacheBlock else list(entry.values())

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def take_events(self) -> list[BlockStored | BlockRemoved | AllBlocksCleared]:
        """The KV cache events since the last call, and forgets them (vLLM's take_events: what
        one scheduler step publishes as one EventBatch). Empty unless enable_kv_cache_events.

        >>> pool = BlockPool(3, 2, enable_kv_cache_events=True); _ = pool.reset_prefix_cache()
        >>> pool.take_events(), pool.take_events()
        ([AllBlocksCleared()], [])
        """
        if self._kv_buffer is None:
            return []
        events, self._kv_buffer.events = self._kv_buffer.events, []
        return events

    # --- mutations -----------------------------------------------------------------------------
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pops `num_blocks` from the queue's head (ref_cnt 1 each), evicting their old hashes.

        >>> pool = BlockPool(3); pool.free_blocks(pool.get_new_blocks(2)[::-1])
        >>> [b.block_id for b in pool.get_new_blocks(1)]  # freed unhashed: 2 went to the front
        [2]
        """
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(f"cannot get {num_blocks} free blocks from the pool "
                             f"({self.free_block_queue.num_free_blocks} free)")
        sink = self._sink
        if sink is not None:
            self.begin_step("get_new_blocks", detail=f"{num_blocks} blocks")
        blocks = self.free_block_queue.popleft_n(num_blocks)
        cache = self.cached_block_hash_to_block
        for block in blocks:
            block_hash = block.block_hash
            if block_hash is not None:  # lazy eviction: the hash goes only now (inlined: hot)
                entry = cache[block_hash]
                if type(entry) is KVCacheBlock:
                    del cache[block_hash]
                else:
                    del entry[block.block_id]
                    if len(entry) == 1:  # back to a single block
                        cache[block_hash] = next(iter(entry.values()))
                block.block_hash = block.parent_hash = None
                block.chain_pos = -1
                self.num_evictions += 1
                if sink is not None:
                    sink.emit(BlockRemoved((hash_to_int64(block_hash),), MEDIUM_GPU, 0))
            block.ref_cnt = 1
        if sink is not None:
            sink.emit(BlockAllocated(tuple(b.block_id for b in blocks)))
            self.end_step("get_new_blocks")
        return blocks

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """A hit: ref_cnt += 1, and out of the free queue if it was there (ref_cnt was 0).
        The null block is skipped, here and in `free_blocks`: its ref_cnt stays 0."""
        sink = self._sink
        if sink is not None:
            self.begin_step("touch", detail=f"{len(blocks)} blocks")
        queue = self.free_block_queue
        for block in blocks:
            if block.is_null:  # never pooled: its ref_cnt is not kept (vLLM skips it too)
                continue
            if block.ref_cnt == 0:  # queue.remove, inlined (hot)
                prev, nxt = block.prev_free_block, block.next_free_block
                prev.next_free_block = nxt
                nxt.prev_free_block = prev
                block.prev_free_block = block.next_free_block = None
                queue.num_free_blocks -= 1
            block.ref_cnt += 1
        if sink is not None:
            sink.emit(BlockTouched(tuple(b.block_id for b in blocks),
                                   tuple(b.ref_cnt for b in blocks)))
            self.end_step("touch")

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """ref_cnt -= 1 each; those at 0 return to the queue: unhashed ones to the front, hashed
        ones to the tail, each group in the order given (first given = evicted first)."""
        if self._sink is None:
            self.free_block_queue.release(ordered_blocks, self.null_block)
            return
        blocks = list(ordered_blocks)
        self.begin_step("free_blocks", detail=f"{len(blocks)} blocks")
        front = self.free_block_queue.release(blocks, self.null_block)
        tail = [b for b in blocks if not b.ref_cnt and b.block_hash is not None and not b.is_null]
        self._sink.emit(BlockFreed(tuple(b.block_id for b in blocks),
                                   tuple(b.ref_cnt for b in blocks),
                                   tuple(b.block_id for b in front),
                                   tuple(b.block_id for b in tail)))
        self.end_step("free_blocks")

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
        token_ids: Sequence[int] = (),
        lora_name: str | None = None,
        extra_keys: Sequence[tuple | None] = (),
        lora_id: int | None = None,
    ) -> None:
        """Gives blocks[num_cached_blocks:num_full_blocks] their hashes and maps them; emits one
        BlockStored (`token_ids` are the request's tokens, `extra_keys` one entry per block,
        both used only for the event)."""
        if num_cached_blocks >= num_full_blocks or not self.enable_caching:
            return
        sink = self._sink
        if sink is not None:
            self.begin_step("cache_full_blocks", detail=f"blocks {num_cached_blocks}..")
        cache = self.cached_block_hash_to_block
        parent = block_hashes[num_cached_blocks - 1] if num_cached_blocks else None
        first_parent = parent
        for i in range(num_cached_blocks, num_full_blocks):
            block, block_hash = blocks[i], block_hashes[i]
            assert block.block_hash is None, f"block {block.block_id} is already cached"
            block.block_hash, block.parent_hash, block.chain_pos = block_hash, parent, i
            entry = cache.get(block_hash)
            if entry is None:
                cache[block_hash] = block
            elif type(entry) is KVCacheBlock:  # a duplicate (vLLM does not dedupe)
                cache[block_hash] = {entry.block_id: entry, block.block_id: block}
            else:
                entry[block.block_id] = block
            parent = block_hash
        if sink is not None:
            self._emit_stored(block_hashes[num_cached_blocks:num_full_blocks], first_parent,
                              token_ids, num_cached_blocks, lora_name, extra_keys, lora_id)
            self.end_step("cache_full_blocks")

    def _emit_stored(self, hashes, parent, token_ids, first, lora_name, extra_keys,
                     lora_id) -> None:
        bs = self.block_size
        keys = tuple(extra_keys[first:first + len(hashes)]) if extra_keys else (None,) * len(hashes)
        self._sink.emit(BlockStored(
            tuple(hash_to_int64(h) for h in hashes),
            None if parent is None else hash_to_int64(parent),
            tuple(token_ids[first * bs:(first + len(hashes)) * bs]), bs, lora_id, MEDIUM_GPU,
            lora_name, keys, 0, "full_attention"))

    def reset_prefix_cache(self) -> bool:
        """Forgets every hash; only when no block is in use (else False, nothing changes)."""
        if self.num_blocks - 1 - self.get_num_free_blocks() != 0:
            return False
        if self._sink is not None:
            self.begin_step("reset_prefix_cache")
        self.cached_block_hash_to_block.clear()
        for block in self.blocks:
            block.block_hash = block.parent_hash = None
            block.chain_pos = -1
        if self._sink is not None:
            self._sink.emit(AllBlocksCleared())
            self.end_step("reset_prefix_cache")
        return True

    # --- checks --------------------------------------------------------------------------------
    def check_invariants(self, refs: dict[int, int] | None = None) -> None:
        """Raises AssertionError unless: the queue is well linked; it holds exactly the blocks
        with ref_cnt == 0 (never the null block); free + in use == num_blocks - 1; every cached
        hash maps to blocks that carry it, and every hashed block is mapped; with `refs`
        (block_id -> live references), each block's ref_cnt equals its references."""
        self.free_block_queue.check_invariants()
        queued = [b.block_id for b in self.free_block_queue]
        idle = [b.block_id for b in self.blocks if b.ref_cnt == 0 and not b.is_null]
        assert sorted(queued) == idle, f"free queue {sorted(queued)[:8]} != ref_cnt 0 {idle[:8]}"
        assert all(b.ref_cnt >= 0 for b in self.blocks), "negative ref_cnt"
        in_use = sum(1 for b in self.blocks if b.ref_cnt > 0 and not b.is_null)
        assert len(queued) + in_use == self.num_blocks - 1, "free + in use != num_blocks - 1"
        mapped = 0
        for block_hash, entry in self.cached_block_hash_to_block.items():
            same = {entry.block_id: entry} if type(entry) is KVCacheBlock else entry
            assert len(same) >= 1 + (type(entry) is dict), "a dict entry holds < 2 blocks"
            for block_id, block in same.items():
                assert block.block_id == block_id and block.block_hash == block_hash, (
                    f"hash maps to block {block_id}, which does not carry it")
            mapped += len(same)
        hashed = sum(1 for b in self.blocks if b.block_hash is not None)
        assert hashed == mapped, f"{hashed} blocks carry a hash, {mapped} are mapped"
        assert self.null_block.block_hash is None, "the null block is cached"
        if refs is not None:
            for block in self.blocks[1:]:
                want = refs.get(block.block_id, 0)
                assert block.ref_cnt == want, (
                    f"block {block.block_id}: ref_cnt {block.ref_cnt}, live references {want}")
