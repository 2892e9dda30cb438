"""vLLM 0.33's block pool as its hybrid cache uses it (v1/core/block_pool.py): one pool of
blocks for every KV-cache group, hashes keyed by (hash, group), partial entries.

A cached block carries one primary key (`block_hash`: the chain hash at hash-block granularity
with the group id appended, vLLM's BlockHashWithGroupId) and how many prefix tokens it covers
(`block_hash_num_tokens`: a full block's boundary, or a boundary inside it for a partial entry);
a block may carry more keys (`cached_block_hashes_by_block`). Free queue, touch, free and lazy
eviction are vLLM's (pool.py's FreeKVCacheBlockQueue). With `enable_kv_cache_events` the KV
events are kept for `take_events` exactly as vLLM queues them: one BlockRemoved per key, a
BlockStored per cache_full_blocks call (even when every block was masked out).
Leaves out: multimodal keys, lookahead tokens, metrics, reuse watchers, other pools' blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from radix.blocks.hashing import block_extra_keys, hash_to_int64
from radix.blocks.hybrid_specs import hashes_at
from radix.blocks.kv_events import MEDIUM_GPU
from radix.blocks.pool import FreeKVCacheBlockQueue
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
from radix.events import Event as _Event


def make_block_hash_with_group_id(block_hash: bytes, group_id: int) -> bytes:
    """vLLM's key: the hash with the group id appended as 4 big-endian bytes.

    >>> make_block_hash_with_group_id(b"h", 3)
    b'h\\x00\\x00\\x00\\x03'
    """
    return block_hash + group_id.to_bytes(4, "big")


def get_block_hash(key: bytes) -> bytes:
    return key[:-4]


def get_group_id(key: bytes) -> int:
    return int.from_bytes(key[-4:], "big")


@dataclass(frozen=True, slots=True)
class BlockHashesMoved(_Event):
    """A request keeps writing into `src_block_id`: its cache entries now point at the private
    copy `dst_block_id` (vLLM's move_block_hashes; no KV event)."""

    src_block_id: int
    dst_block_id: int
    num_keys: int


@dataclass
class CacheRequest:
    """A request as the hybrid block cache reads it (vLLM's Request fields it uses)."""

    request_id: str
    all_token_ids: list[int]  # prompt + output so far
    num_prompt_tokens: int
    block_hashes: list[bytes] = field(default_factory=list)  # at hash_block_size granularity
    lora_name: str | None = None
    lora_id: int | None = None  # for BlockStored.lora_id
    cache_salt: str | None = None
    num_computed_tokens: int = 0  # written by the scheduler after each step
    shared_prefix_boundary: int = 0  # set at admission from get_computed_blocks

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)


class HybridBlock:
    """One block of one group's pages. `block_hash` is set only while it is cached."""

    __slots__ = ("block_id", "ref_cnt", "block_hash", "block_hash_num_tokens", "is_null",
                 "prev_free_block", "next_free_block")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None  # primary key: hash + group id
        self.block_hash_num_tokens: int | None = None  # prefix tokens that key covers
        self.is_null = False
        self.prev_free_block: HybridBlock | None = None
        self.next_free_block: HybridBlock | None = None

    def reset_hash(self) -> None:
        self.block_hash = self.block_hash_num_tokens = None

    def __repr__(self) -> str:
        return f"HybridBlock({self.block_id}, ref_cnt={self.ref_cnt})"


class HybridBlockPool:
    """Blocks 1..num_gpu_blocks-1 for every group; block 0 is the null block.

    >>> pool = HybridBlockPool(4, True, 16); [b.block_id for b in pool.get_new_blocks(2)]
    [1, 2]
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool, hash_block_size: int,
                 enable_kv_cache_events: bool = False, sink: EventSink | None = None) -> None:
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1 (block 0 is null), got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.hash_block_size = hash_block_size
        self.blocks = [HybridBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # key -> its block, or {block_id: block} while several carry it (first cached first)
        self.cached_block_hash_to_block: dict[bytes, HybridBlock | dict[int, HybridBlock]] = {}
        # block id -> its keys besides the primary one (a dict: insertion order, deterministic)
        self.cached_block_hashes_by_block: dict[int, dict[bytes, None]] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.enable_kv_cache_events = enable_kv_cache_events
        self.kv_event_queue: list[_Event] = []
        self.sink = sink
        self._step = 0
        self._depth = 0

    # --- steps (only with a sink) ------------------------------------------------------------
    def begin_step(self, op: str, rid: str | None = None, detail: str = "") -> None:
        self._depth += 1
        if self._depth == 1 and self.sink is not None:
            self.sink.emit(StepStarted(self._step, op, rid, detail))

    def end_step(self, op: str) -> None:
        self._depth -= 1
        if self._depth == 0:
            if self.sink is not None:
                self.sink.emit(StepEnded(self._step, op))
            self._step += 1

    def _kv_event(self, event: _Event) -> None:
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(event)
        if self.sink is not None:
            self.sink.emit(event)

    # --- lookups -------------------------------------------------------------------------------
    def get_one_block(self, key: bytes) -> HybridBlock | None:
        entry = self.cached_block_hash_to_block.get(key)
        if entry is None or type(entry) is HybridBlock:
            return entry
        return next(iter(entry.values()))

    def get_cached_block(self, block_hash: bytes,
                         group_ids: Sequence[int]) -> list[HybridBlock] | None:
        """The first block cached under `block_hash` in each group, or None if any group misses.
        Changes nothing."""
        if len(group_ids) == 1:
            block = self.get_one_block(block_hash + group_ids[0].to_bytes(4, "big"))
            return None if block is None else [block]
        out = []
        for gid in group_ids:
            block = self.get_one_block(make_block_hash_with_group_id(block_hash, gid))
            if block is None:
                return None
            out.append(block)
        return out

    def _contains(self, key: bytes, block_id: int) -> bool:
        entry = self.cached_block_hash_to_block.get(key)
        if entry is None:
            return False
        return entry.block_id == block_id if type(entry) is HybridBlock else block_id in entry

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    # --- hash bookkeeping --------------------------------------------------------------------
    def _insert_block_hash(self, key: bytes, block: HybridBlock, num_tokens: int | None) -> None:
        if block.block_hash == key or self._contains(key, block.block_id):
            return
        if block.block_hash is None:
            block.block_hash, block.block_hash_num_tokens = key, num_tokens
        else:
            self.cached_block_hashes_by_block.setdefault(block.block_id, {})[key] = None
        cache = self.cached_block_hash_to_block
        entry = cache.get(key)
        if entry is None:
            cache[key] = block
        elif type(entry) is HybridBlock:
            cache[key] = {entry.block_id: entry, block.block_id: block}
        else:
            entry[block.block_id] = block

    def _remove_cached_block_hashes(self, block: HybridBlock) -> list[bytes]:
        """Drops every key of `block` (primary first); returns those that were mapped to it."""
        keys = [] if block.block_hash is None else [block.block_hash]
        keys.extend(self.cached_block_hashes_by_block.pop(block.block_id, ()))
        removed = []
        cache = self.cached_block_hash_to_block
        for key in keys:
            entry = cache.get(key)
            if entry is None:
                continue
            if type(entry) is HybridBlock:
                if entry.block_id == block.block_id:
                    del cache[key]
                    removed.append(key)
            elif entry.pop(block.block_id, None) is not None:
                removed.append(key)
                if not entry:
                    del cache[key]
                # subtle: vLLM keeps a dict entry as a dict even when one block is left
        block.reset_hash()
        return removed

    def _emit_removed(self, keys: list[bytes]) -> None:
        if not keys or not (self.enable_kv_cache_events or self.sink is not None):
            return
        for key in keys:  # one event per key, as vLLM
            self._kv_event(BlockRemoved((hash_to_int64(get_block_hash(key)),), MEDIUM_GPU,
                                        get_group_id(key)))

    def _maybe_evict_cached_block(self, block: HybridBlock) -> bool:
        removed = self._remove_cached_block_hashes(block)
        self._emit_removed(removed)
        return bool(removed)

    # --- caching -----------------------------------------------------------------------------
    def cache_full_blocks(self, request: CacheRequest, blocks: Sequence[HybridBlock],
                          num_cached_blocks: int, num_full_blocks: int, block_size: int,
                          group_id: int, block_mask: Sequence[bool] | None = None) -> None:
        """Keys blocks[num_cached_blocks:num_full_blocks] by their chain hashes in `group_id`;
        null blocks and those `block_mask` leaves out stay uncached. A block already keyed by
        a partial entry is promoted (its old keys go, BlockRemoved). One BlockStored for the
        call, covering every token of the range."""
        if num_cached_blocks >= num_full_blocks:
            return
        hashes = hashes_at(request.block_hashes, self.hash_block_size, block_size)
        stored: list[int] = []
        keys: list[tuple | None] = []
        listened = self.enable_kv_cache_events or self.sink is not None
        suffix = group_id.to_bytes(4, "big")
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block.is_null or (block_mask is not None and not block_mask[i - num_cached_blocks]):
                continue
            if block.block_hash is not None:  # a partial entry grows into the full block
                self._emit_removed(self._remove_cached_block_hashes(block))
            self._insert_block_hash(hashes[i] + suffix, block, (i + 1) * block_size)
            if listened:
                stored.append(hash_to_int64(hashes[i]))
                keys.append(block_extra_keys(0 if i == 0 else 1, request.lora_name,
                                             request.cache_salt))
        if listened:
            parent = hash_to_int64(hashes[num_cached_blocks - 1]) if num_cached_blocks else None
            tokens = request.all_token_ids[num_cached_blocks * block_size:
                                           num_full_blocks * block_size]
            self._kv_event(BlockStored(tuple(stored), parent, tuple(tokens), block_size,
                                       request.lora_id, MEDIUM_GPU, request.lora_name,
                                       tuple(keys) if keys else None, group_id))

    def cache_partial_block(self, request: CacheRequest, block: HybridBlock, num_tokens: int,
                            group_id: int, block_size: int,
                            replace_existing_hashes: bool = False) -> bytes | None:
        """Makes `block` reachable from the prefix boundary `num_tokens` (a multiple of the hash
        block, inside the block): the chain hash at that boundary becomes one of its keys.
        Returns the key, or None for the null block."""
        if block.is_null:
            return None
        hbs = self.hash_block_size
        n = num_tokens // hbs
        block_hash = request.block_hashes[n - 1]
        key = make_block_hash_with_group_id(block_hash, group_id)
        already = block.block_hash == key or self._contains(key, block.block_id)
        if replace_existing_hashes:
            self._emit_removed(self._remove_cached_block_hashes(block))
            already = False
        elif (not already and block.block_hash is not None
              and block.block_hash_num_tokens is not None
              and block.block_hash_num_tokens < n * hbs):
            self._emit_removed(self._remove_cached_block_hashes(block))
        self._insert_block_hash(key, block, n * hbs)
        if not already and (self.enable_kv_cache_events or self.sink is not None):
            start = (n - 1) * hbs
            parent = hash_to_int64(request.block_hashes[n - 2]) if n > 1 else None
            self._kv_event(BlockStored(
                (hash_to_int64(block_hash),), parent, tuple(request.all_token_ids[start:n * hbs]),
                n * hbs - start, request.lora_id, MEDIUM_GPU, request.lora_name,
                (block_extra_keys(0 if start == 0 else 1, request.lora_name,
                                  request.cache_salt),), group_id))
        return key

    def move_block_hashes(self, src: HybridBlock, dst: HybridBlock) -> None:
        """Re-points `src`'s cache entries to `dst` (a fresh block), no KV event."""
        num_tokens = src.block_hash_num_tokens
        moved = self._remove_cached_block_hashes(src)
        for key in moved:
            self._insert_block_hash(key, dst, num_tokens)
        if self.sink is not None:
            self.sink.emit(BlockHashesMoved(src.block_id, dst.block_id, len(moved)))

    # --- allocation --------------------------------------------------------------------------
    def get_new_blocks(self, num_blocks: int) -> list[HybridBlock]:
        """Pops `num_blocks` off the free queue's head (ref_cnt 1 each), evicting their keys."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(f"cannot get {num_blocks} free blocks from the pool")
        blocks = self.free_block_queue.popleft_n(num_blocks)
        for block in blocks:
            if self.enable_caching:
                self._maybe_evict_cached_block(block)
            block.ref_cnt += 1
        if self.sink is not None and blocks:
            self.sink.emit(BlockAllocated(tuple(b.block_id for b in blocks)))
        return blocks

    def touch(self, blocks: Iterable[HybridBlock]) -> None:
        """A hit: ref_cnt += 1 (out of the free queue when it was 0); the null block is skipped."""
        touched = []
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1
            touched.append(block)
        if self.sink is not None and touched:
            self.sink.emit(BlockTouched(tuple(b.block_id for b in touched),
                                        tuple(b.ref_cnt for b in touched)))

    def free_blocks(self, ordered_blocks: Iterable[HybridBlock]) -> None:
        """ref_cnt -= 1 each; at 0 an uncached block goes to the queue's front (reused first),
        a cached one to the tail, each in the order given."""
        given, front, tail = [], [], []
        for block in ordered_blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            given.append(block)
            if block.ref_cnt == 0:
                (tail if block.block_hash is not None and self.enable_caching
                 else front).append(block)
        self.free_block_queue.prepend_n(front)
        self.free_block_queue.append_n(tail)
        if self.sink is not None and given:
            self.sink.emit(BlockFreed(tuple(b.block_id for b in given),
                                      tuple(b.ref_cnt for b in given),
                                      tuple(b.block_id for b in front),
                                      tuple(b.block_id for b in tail)))

    def reset_prefix_cache(self) -> bool:
        """Forgets every key, only when no block is in use (else False, nothing changes)."""
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        self.cached_block_hash_to_block = {}
        self.cached_block_hashes_by_block.clear()
        for block in self.blocks:
            block.reset_hash()
        self._kv_event(AllBlocksCleared())
        return True

    def take_events(self) -> list[_Event]:
        """The KV events since the last call (vLLM's take_events), and forgets them."""
        events, self.kv_event_queue = self.kv_event_queue, []
        return events

    def check_invariants(self) -> None:
        """Raises AssertionError unless the queue holds exactly the ref_cnt 0 blocks, free + in
        use == num_gpu_blocks - 1, and every key maps to blocks that carry it (and back)."""
        self.free_block_queue.check_invariants()
        queued = sorted(b.block_id for b in self.free_block_queue)
        idle = [b.block_id for b in self.blocks[1:] if b.ref_cnt == 0]
        assert queued == idle, f"free queue {queued[:8]} != ref_cnt 0 {idle[:8]}"
        assert all(b.ref_cnt >= 0 for b in self.blocks), "negative ref_cnt"
        carried = {}
        for b in self.blocks:
            keys = ([b.block_hash] if b.block_hash else []) + list(
                self.cached_block_hashes_by_block.get(b.block_id, ()))
            for key in keys:
                carried.setdefault(key, set()).add(b.block_id)
        mapped = {k: {e.block_id} if type(e) is HybridBlock else set(e)
                  for k, e in self.cached_block_hash_to_block.items()}
        assert carried == mapped, "keys carried by blocks != the hash map"
