"""vLLM 0.33's single-type KV cache managers for attention
(v1/core/single_type_kv_cache_manager.py): one per KV-cache group, each keeping its group's block
table per request.

`SingleTypeKVCacheManager` holds what every kind shares: how many blocks a step needs, adding a
request's hits, new blocks, caching full blocks (through the kind's `reachable_block_mask`),
freeing, and nulling blocks no longer attended to. `FullAttentionManager` hits the longest run of
cached blocks from the start, and with fine-grained hashes (`prefix_match_unit`) one boundary
inside the next block; `SlidingWindowManager` needs only the last ceil((window-1)/block) blocks
before a boundary, searched right to left, and nulls the blocks the window has passed. The Mamba
manager is radix/blocks/mamba_manager.py. Leaves out: EAGLE drops, DCP/PCP, external (connector)
tokens, zeroing, admission caps other than the sliding window's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from radix.blocks.hybrid_pool import CacheRequest, HybridBlock, HybridBlockPool
from radix.blocks.hybrid_specs import KVCacheSpec, SlidingWindowSpec, hashes_at


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SingleTypeKVCacheManager:
    """The block tables of one KV-cache group (see the module docstring)."""

    supports_fine_grained_hash_lookup = False

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: HybridBlockPool,
                 enable_caching: bool, kv_cache_group_id: int, scheduler_block_size: int,
                 max_admission_blocks_per_request: int | None = None) -> None:
        self.scheduler_block_size = scheduler_block_size
        # where hits may land: the scheduler block, or the hash block with fine-grained hits
        self.cache_hit_alignment_tokens = scheduler_block_size
        self.block_size = kv_cache_spec.block_size
        self.kv_cache_spec = kv_cache_spec
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self.req_to_blocks: defaultdict[str, list[HybridBlock]] = defaultdict(list)
        self.num_cached_block: dict[str, int] = {}  # running requests only
        self.kv_cache_group_id = kv_cache_group_id
        self._null_block = block_pool.null_block
        self._partial_hit_reqs: dict[str, tuple[int, HybridBlock]] = {}  # copy-on-write due
        self._pending_cow_copies: list[tuple[HybridBlock, HybridBlock]] = []

    # --- how many blocks a step needs ----------------------------------------------------------
    def _has_partial_local_hit(self, new_computed_blocks: Sequence[HybridBlock],
                               num_local_computed_tokens: int) -> bool:
        return bool(new_computed_blocks) and num_local_computed_tokens % self.block_size != 0

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[HybridBlock],
                                   total_computed_tokens: int, num_local_computed_tokens: int,
                                   num_tokens_main_model: int, apply_admission_cap: bool = False,
                                   prefill_end: int = 0) -> int:
        """Blocks to take from the pool so the request has slots for `num_tokens` tokens, hits
        leaving the free queue included. Changes nothing."""
        num_required = cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.max_admission_blocks_per_request is not None:
            num_required = min(num_required, self.max_admission_blocks_per_request)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:  # running: no new hits
            return max(num_required - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_local_computed_blocks = len(new_computed_blocks) + num_req_blocks
        num_new = max(num_required - max(num_skipped_blocks, num_local_computed_blocks), 0)
        skipped_hits = max(0, num_skipped_blocks - num_req_blocks)
        num_evictable = sum(1 for b in new_computed_blocks[skipped_hits:]
                            if b.ref_cnt == 0 and not b.is_null)
        if self._has_partial_local_hit(new_computed_blocks, num_local_computed_tokens):
            num_new += 1  # the private copy of the shared tail block
        return num_new + num_evictable

    # --- adding blocks -------------------------------------------------------------------------
    def add_local_computed_blocks(self, request_id: str,
                                  new_computed_blocks: Sequence[HybridBlock],
                                  num_local_computed_tokens: int) -> None:
        """A new request's hits: touched, after null blocks for what its window skips."""
        req_blocks = self.req_to_blocks[request_id]
        assert not req_blocks, f"request {request_id!r} already holds blocks"
        num_skipped = self.get_num_skipped_tokens(num_local_computed_tokens) // self.block_size
        if num_skipped > 0:
            new_computed_blocks = new_computed_blocks[num_skipped:]
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        req_blocks.extend([self._null_block] * num_skipped)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)
        if self._has_partial_local_hit(new_computed_blocks, num_local_computed_tokens):
            idx = num_local_computed_tokens // self.block_size
            self._partial_hit_reqs[request_id] = (idx, new_computed_blocks[-1])
            self.num_cached_block[request_id] = idx

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int) -> list[HybridBlock]:
        """Blocks until the table covers `num_tokens`; a partial hit's shared tail block is first
        swapped for a private copy (copy-on-write)."""
        cow_blocks: list[HybridBlock] = []
        if request_id in self._partial_hit_reqs:
            idx, source = self._partial_hit_reqs.pop(request_id)
            cow = self.block_pool.get_new_blocks(1)[0]
            self._apply_cow(request_id, idx, source, cow)
            cow_blocks.append(cow)
        req_blocks = self.req_to_blocks[request_id]
        num_new = cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return cow_blocks
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return cow_blocks + new_blocks

    def _apply_cow(self, request_id: str, idx: int, source: HybridBlock,
                   cow: HybridBlock) -> None:
        """Both ends stay held until the copy ran: the source by the hit's reference, the copy
        by one extra reference (released with take_kv_cache_block_copies' blocks)."""
        req_blocks = self.req_to_blocks[request_id]
        assert req_blocks[idx] is source and not source.is_null and source.ref_cnt > 0
        req_blocks[idx] = cow
        self._pending_cow_copies.append((source, cow))
        cow.ref_cnt += 1

    def take_pending_cow_copies(self) -> list[tuple[HybridBlock, HybridBlock]]:
        pending, self._pending_cow_copies = self._pending_cow_copies, []
        return pending

    # --- caching -------------------------------------------------------------------------------
    def cache_blocks(self, request: CacheRequest, num_tokens: int,
                     retention_interval: int | None, replay_boundaries: Sequence[int]) -> None:
        """Caches the request's blocks that are full within `num_tokens`, those the kind's mask
        keeps (the boundaries a later request can resume at, and the shared-prefix junction)."""
        num_cached = self.num_cached_block.get(request.request_id, 0)
        num_hashed_tokens = len(request.block_hashes) * self.block_pool.hash_block_size
        num_full = min(num_tokens, num_hashed_tokens) // self.block_size
        if num_cached >= num_full:
            return
        boundaries = [*replay_boundaries]
        if request.shared_prefix_boundary:
            boundaries.append(request.shared_prefix_boundary)
        mask = self.reachable_block_mask(num_cached, num_full, self.cache_hit_alignment_tokens,
                                         self.kv_cache_spec, retention_interval, boundaries)
        self.block_pool.cache_full_blocks(request, self.req_to_blocks[request.request_id],
                                          num_cached, num_full, self.block_size,
                                          self.kv_cache_group_id, mask)
        self.num_cached_block[request.request_id] = num_full

    @classmethod
    def reachable_block_mask(cls, start_block: int, end_block: int, alignment_tokens: int,
                             kv_cache_spec: KVCacheSpec, retention_interval: int | None,
                             reachable_boundaries: Sequence[int]) -> list[bool] | None:
        """Which of blocks[start:end] to cache; None: all of them (full attention)."""
        return None

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: Sequence[bytes], max_length: int,
                               kv_cache_group_ids: list[int], block_pool: HybridBlockPool,
                               kv_cache_spec: KVCacheSpec, alignment_tokens: int
                               ) -> tuple[tuple[list[HybridBlock], ...], int]:
        """(hit blocks per group in `kv_cache_group_ids`, hit length), at most `max_length`
        tokens, a multiple of `alignment_tokens`. Changes nothing."""
        raise NotImplementedError

    # --- freeing -------------------------------------------------------------------------------
    def pop_blocks_for_free(self, request_id: str) -> list[HybridBlock]:
        blocks = self.req_to_blocks.pop(request_id, [])
        self.num_cached_block.pop(request_id, None)
        self._partial_hit_reqs.pop(request_id, None)
        head = 0
        while head < len(blocks) and blocks[head].is_null:
            head += 1
        return blocks[head:]

    def free(self, request_id: str) -> None:
        """The request's blocks back to the pool, last block first."""
        self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))

    def _remove_blocks_in_range(self, request_id: str, first: int, last: int) -> None:
        """Frees blocks[first:last] and puts the null block in their place, from the end down
        to the first already-null block."""
        if request_id not in self.req_to_blocks or first >= last:
            return
        blocks = self.req_to_blocks[request_id]
        freed = []
        for i in range(min(last, len(blocks)) - 1, first - 1, -1):
            if blocks[i] is self._null_block:
                break
            freed.append(blocks[i])
            blocks[i] = self._null_block
        if freed:
            self.block_pool.free_blocks(freed)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Frees the blocks before the attention window of the next token."""
        num_skipped = self.get_num_skipped_tokens(processed_computed_tokens)
        if num_skipped <= 0:
            return
        blocks = self.req_to_blocks[request_id]
        self._remove_blocks_in_range(request_id, 0,
                                     min(num_skipped // self.block_size, len(blocks)))

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return 0

    def new_step_starts(self) -> None:
        return None


class FullAttentionManager(SingleTypeKVCacheManager):
    supports_fine_grained_hash_lookup = True

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                               kv_cache_spec, alignment_tokens):
        """The cached blocks from the start; with fine-grained hashes, then the longest cached
        boundary inside the next block (probed from its end down).

        >>> from radix.blocks.hybrid_specs import FullAttentionSpec
        >>> pool = HybridBlockPool(4, True, 4)
        >>> FullAttentionManager.find_longest_cache_hit([b"a"], 4, [0], pool,
        ...                                             FullAttentionSpec(4), 4)
        (([],), 0)
        """
        bs = kv_cache_spec.block_size
        hbs = block_pool.hash_block_size
        fine = alignment_tokens < bs and bs % alignment_tokens == 0
        full_hashes = hashes_at(block_hashes, alignment_tokens if fine else hbs, bs)
        computed = tuple([] for _ in kv_cache_group_ids)
        if len(kv_cache_group_ids) == 1:  # one group: every key read in C, as vLLM's loop would
            suffix = kv_cache_group_ids[0].to_bytes(4, "big")
            found = list(map(block_pool.cached_block_hash_to_block.get,
                             [h + suffix for h in full_hashes[:max_length // bs]]))
            found = found[:found.index(None)] if None in found else found
            computed[0].extend(e if type(e) is HybridBlock else next(iter(e.values()))
                               for e in found)
        else:
            for block_hash in full_hashes[:max_length // bs]:
                cached = block_pool.get_cached_block(block_hash, kv_cache_group_ids)
                if not cached:
                    break
                for out, block in zip(computed, cached):
                    out.append(block)
        hit = len(computed[0]) * bs
        if fine:  # phase 2: a boundary inside the first block not matched
            scale = bs // alignment_tokens
            first = len(computed[0]) * scale
            top = min(first + scale - 1, max_length // alignment_tokens, len(block_hashes))
            for fine_idx in range(top - 1, first - 1, -1):
                cached = block_pool.get_cached_block(block_hashes[fine_idx], kv_cache_group_ids)
                if not cached:
                    continue
                for out, block in zip(computed, cached):
                    out.append(block)
                hit = (fine_idx + 1) * alignment_tokens
                break
        hit -= hit % alignment_tokens
        for out in computed:
            del out[cdiv(hit, bs):]
        return computed, hit

    def cache_blocks(self, request, num_tokens, retention_interval, replay_boundaries):
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries)
        if self.block_size != self.block_pool.hash_block_size:
            self._cache_partial_tail_block(request, num_tokens)

    def _cache_partial_tail_block(self, request: CacheRequest, num_tokens: int) -> None:
        """Keys the block holding the prompt's last hash boundary (num_prompt_tokens - 1, floored
        to the hash block) from that boundary, when it ends inside the block."""
        hbs = self.block_pool.hash_block_size
        boundary = min((request.num_prompt_tokens - 1) // hbs, len(request.block_hashes)) * hbs
        if boundary == 0 or boundary > num_tokens or boundary % self.block_size == 0:
            return
        blocks = self.req_to_blocks[request.request_id]
        idx = boundary // self.block_size
        if idx >= len(blocks):
            return
        self.block_pool.cache_partial_block(request, blocks[idx], boundary,
                                            self.kv_cache_group_id, self.block_size)


class SlidingWindowManager(SingleTypeKVCacheManager):
    def __init__(self, kv_cache_spec: SlidingWindowSpec, *args, **kwargs) -> None:
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.sliding_window = kv_cache_spec.sliding_window

    @staticmethod
    def _contiguous_blocks_for_hit(window: int, block_size: int) -> int:
        return cdiv(window - 1, block_size)

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                               kv_cache_spec, alignment_tokens):
        """The rightmost run of `need` cached blocks ending on an aligned boundary, blocks
        before it null; with no such run, the cached blocks from the start (a window that has
        not slid yet), floored to the alignment. A hit never ends inside a block."""
        bs = kv_cache_spec.block_size
        hashes = hashes_at(block_hashes, block_pool.hash_block_size, bs)
        need = cls._contiguous_blocks_for_hit(kv_cache_spec.sliding_window, bs)
        max_blocks = max_length // bs
        null = block_pool.null_block
        computed = tuple([null] * max_blocks for _ in kv_cache_group_ids)
        run = 0
        found = False
        for i in range(max_blocks - 1, -1, -1):
            cached = block_pool.get_cached_block(hashes[i], kv_cache_group_ids)
            if not cached:
                run = 0
                continue
            if run == 0 and bs != alignment_tokens and ((i + 1) * bs) % alignment_tokens:
                continue  # a run must end on an aligned boundary
            for out, block in zip(computed, cached):
                out[i] = block
            run += 1
            if run >= need:
                for out in computed:
                    del out[i + run:]
                found = True
                break
        if not found:
            for out in computed:
                del out[run:]
            while bs != alignment_tokens and len(computed[0]) * bs % alignment_tokens:
                for out in computed:
                    out.pop()
        return computed, len(computed[0]) * bs

    @classmethod
    def reachable_block_mask(cls, start_block, end_block, alignment_tokens, kv_cache_spec,
                             retention_interval, reachable_boundaries):
        """Only the `need` blocks before each boundary a hit can end on: every aligned boundary
        (retention None), the retention grid's (> 0), and always the replay boundary and the
        shared-prefix junction (unless retention is None: then all are kept anyway)."""
        bs = kv_cache_spec.block_size
        if alignment_tokens % bs:
            return None
        need = cls._contiguous_blocks_for_hit(kv_cache_spec.sliding_window, bs)
        mask = [False] * (end_block - start_block)
        segment = alignment_tokens if retention_interval is None else (retention_interval or None)
        if segment is not None:
            per_segment = segment // bs
            if need >= per_segment:
                return None
            for i in range(start_block, end_block):
                if i % per_segment >= per_segment - need:
                    mask[i - start_block] = True
        if retention_interval is not None:
            for boundary in reachable_boundaries:
                end = boundary // alignment_tokens * alignment_tokens // bs
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True
        return mask

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens before the window of the next token: window 4, 7 computed -> tokens 0..3."""
        return max(0, num_computed_tokens - self.sliding_window + 1)
