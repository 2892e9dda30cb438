"""vLLM 0.33's MambaManager (v1/core/single_type_kv_cache_manager.py): the KV-cache group of
Mamba / linear-attention layers, whose "block" is one recurrent state, not tokens' KV.

In `mamba_cache_mode="align"` a request's table is position-indexed like attention's, but it
holds real blocks only where a state lives: the running state (the last block), the state the
step started from (freed one step later), and, when the prefill kernel exports mid-chunk
states (FlashInfer GDN, Mamba-2), a checkpoint block. A state is cached only where it can be
reused: the prompt's last block boundary before its final token, the shared-prefix junction
(`shared_prefix_boundary`, set by get_computed_blocks), and the retention grid if one is set.
A hit is the rightmost cached state at or below the candidate length (or, with fine-grained
hashes, any hash-block boundary). In "none" mode the group is one state, nothing is cached.
Leaves out: speculative blocks, EAGLE, KV-connector offloads.
"""

from __future__ import annotations

from radix.blocks.hybrid_pool import CacheRequest, HybridBlock
from radix.blocks.hybrid_specs import (
    MambaSpec,
    get_mamba_prefill_checkpoint_position,
    hashes_at,
    is_mamba_prefill_checkpoint_valid,
)
from radix.blocks.single_type import SingleTypeKVCacheManager, cdiv


class MambaManager(SingleTypeKVCacheManager):
    supports_fine_grained_hash_lookup = True

    def __init__(self, kv_cache_spec: MambaSpec, *args, **kwargs) -> None:
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.mamba_cache_mode = kv_cache_spec.mamba_cache_mode
        if self.mamba_cache_mode != "align" and self.enable_caching:
            raise ValueError("Mamba prefix caching requires mamba_cache_mode='align'")
        self.align = self.mamba_cache_mode == "align"
        self.has_prefill_checkpoint_blocks = (
            self.align and kv_cache_spec.num_prefill_checkpoint_blocks > 0)
        # states cached during this scheduler step: a sibling may not use them before it runs
        self.cached_blocks_this_step: set[bytes] = set()
        self.last_state_block_idx: dict[str, int] = {}  # the state the step started from
        self._num_retired_blocks: dict[str, int] = {}
        self._allocated_block_reqs: set[str] = set()
        self._checkpoints: dict[str, tuple[int, int]] = {}  # rid -> (position, block index)

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                               kv_cache_spec, alignment_tokens):
        """The rightmost cached state at most `max_length` tokens in, on an aligned boundary;
        blocks before it are null (a state needs nothing earlier)."""
        bs = kv_cache_spec.block_size
        null = block_pool.null_block
        computed = tuple([] for _ in kv_cache_group_ids)
        if alignment_tokens < bs and bs % alignment_tokens == 0:  # fine-grained hits
            scale = bs // alignment_tokens
            for fine_idx in range(min(max_length // alignment_tokens, len(block_hashes)) - 1,
                                  -1, -1):
                cached = block_pool.get_cached_block(block_hashes[fine_idx], kv_cache_group_ids)
                if cached:
                    for out, block in zip(computed, cached):
                        out.extend([null] * (fine_idx // scale))
                        out.append(block)
                    return computed, (fine_idx + 1) * alignment_tokens
            return computed, 0
        hashes = hashes_at(block_hashes, block_pool.hash_block_size, bs)
        for i in range(max_length // bs - 1, -1, -1):
            cached = block_pool.get_cached_block(hashes[i], kv_cache_group_ids)
            if not cached:
                continue
            if bs != alignment_tokens and (i + 1) * bs % alignment_tokens:
                continue
            for out, block in zip(computed, cached):
                out.extend([null] * i)
                out.append(block)
            return computed, (i + 1) * bs
        return computed, 0

    @classmethod
    def reachable_block_mask(cls, start_block, end_block, alignment_tokens, kv_cache_spec,
                             retention_interval, reachable_boundaries):
        """Dense (None) without retention; else one state per retention segment (> 0) and the
        state ending on each reachable boundary (replay boundary, junction)."""
        if retention_interval is None:
            return None
        bs = kv_cache_spec.block_size
        mask = [False] * (end_block - start_block)
        if retention_interval:
            per_segment = retention_interval // bs
            if per_segment <= 1:
                return None
            first = (start_block + per_segment) // per_segment * per_segment - 1
            for i in range(first - start_block, len(mask), per_segment):
                mask[i] = True
        for boundary in reachable_boundaries:
            block = boundary // alignment_tokens * alignment_tokens // bs - 1
            if start_block <= block < end_block:
                mask[block - start_block] = True
        return mask

    # --- freeing states no step reads any more -----------------------------------------------
    def _remove_blocks_in_range(self, request_id: str, first: int, last: int) -> None:
        if not self.align:
            return super()._remove_blocks_in_range(request_id, first, last)
        blocks = self.req_to_blocks.get(request_id, [])
        first = max(first, self._num_retired_blocks.get(request_id, 0))
        last = min(last, len(blocks))
        if first >= last:
            return
        freed = []
        for i in range(last - 1, first - 1, -1):  # prefill leaves null gaps between states
            if blocks[i].is_null:
                continue
            freed.append(blocks[i])
            blocks[i] = self._null_block
        if freed:
            self.block_pool.free_blocks(freed)
        self._num_retired_blocks[request_id] = last

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        super().remove_skipped_blocks(request_id, processed_computed_tokens)
        if not self.align:
            return
        idx = self.last_state_block_idx.get(request_id)  # the state two steps back
        if idx is not None and idx < cdiv(processed_computed_tokens, self.block_size) - 1:
            blocks = self.req_to_blocks[request_id]
            if blocks[idx] is not self._null_block:
                self.block_pool.free_blocks([blocks[idx]])
                blocks[idx] = self._null_block

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens - 1  # only the state after the last token is needed

    # --- allocation --------------------------------------------------------------------------
    def _needs_internal_checkpoint(self, request_id: str, query_start: int, query_end: int,
                                   position: int, prefill_end: int) -> bool:
        idx = cdiv(query_end, self.block_size) - 2
        blocks = self.req_to_blocks[request_id]
        return (self.has_prefill_checkpoint_blocks and query_end >= prefill_end
                and is_mamba_prefill_checkpoint_valid(
                    query_start, query_end, position, self.block_pool.hash_block_size,
                    self.block_size, self.kv_cache_spec.prefill_checkpoint_alignment)
                and idx >= 0 and (idx >= len(blocks) or blocks[idx].is_null))

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks,
                                   total_computed_tokens, num_local_computed_tokens,
                                   num_tokens_main_model, apply_admission_cap=False,
                                   prefill_end=0):
        """Align mode: the running state's block, a copy for a partial hit, a checkpoint block
        when the kernel exports one this chunk; never more. A hit on a state cached in this
        very step cannot be scheduled now (more blocks than the pool holds)."""
        if (new_computed_blocks
                and new_computed_blocks[-1].block_hash in self.cached_blocks_this_step):
            return self.block_pool.num_gpu_blocks + 1
        if not self.align:
            return super().get_num_blocks_to_allocate(
                request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                num_local_computed_tokens, num_tokens_main_model, apply_admission_cap,
                prefill_end)
        num_tokens = num_tokens_main_model
        num_new = (cdiv(num_tokens, self.block_size) - len(new_computed_blocks)
                   - len(self.req_to_blocks[request_id]))
        partial = (self._has_partial_local_hit(new_computed_blocks, num_local_computed_tokens)
                   or request_id in self._partial_hit_reqs)
        if partial:
            num_new = max(num_new, 0) + 1
        position = get_mamba_prefill_checkpoint_position(num_tokens,
                                                         self.cache_hit_alignment_tokens)
        if not self._needs_internal_checkpoint(request_id, total_computed_tokens, num_tokens,
                                               position, prefill_end):
            position = 0
        if not apply_admission_cap:
            if position > 0:
                self._checkpoints[request_id] = (position, cdiv(num_tokens, self.block_size) - 2)
            else:
                self._checkpoints.pop(request_id, None)
        if num_new > 0:
            num_new = min(num_new, 1 + int(partial) + int(position > 0))
        return num_new + sum(1 for b in new_computed_blocks if b.ref_cnt == 0 and not b.is_null)

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int) -> list[HybridBlock]:
        """Nulls up to the new running state's block (keeping the checkpoint's), then the new
        blocks; a partial hit's shared state is copied first (or, when the request already runs
        on it, the cache entry moves to the copy)."""
        if not self.align:
            return super().allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
        req_blocks = self.req_to_blocks[request_id]
        num_required = cdiv(num_tokens_main_model, self.block_size)
        checkpoint_block = int(request_id in self._checkpoints)
        partial = self._partial_hit_reqs.get(request_id)
        if num_required <= len(req_blocks) and partial is None and not checkpoint_block:
            self._allocated_block_reqs.add(request_id)
            return []
        prev_len = len(req_blocks)
        running = request_id in self._allocated_block_reqs
        if running or prev_len > 0:
            self.last_state_block_idx[request_id] = prev_len - 1
        null_end = num_required - 1 - checkpoint_block
        if prev_len < num_required - 1 and prev_len < null_end:
            req_blocks.extend([self._null_block] * (null_end - prev_len))
        num_new = max(num_required - len(req_blocks), 0) + (partial is not None)
        assert num_new <= 1 + (partial is not None) + checkpoint_block
        new_blocks = self.block_pool.get_new_blocks(num_new)
        returned = req_blocks[prev_len:]
        if partial is not None:
            idx, source = partial
            cow, new_blocks = new_blocks[0], new_blocks[1:]
            if running:  # its table is append-only: the cache entry moves to the copy instead
                assert req_blocks[idx] is source
                self.block_pool.move_block_hashes(source, cow)
                self._pending_cow_copies.append((source, cow))
                source.ref_cnt += 1
                if cow.block_hash is not None:
                    self.cached_blocks_this_step.add(cow.block_hash)
            else:
                self._apply_cow(request_id, idx, source, cow)
                returned = [cow] + returned
        req_blocks.extend(new_blocks)
        self._allocated_block_reqs.add(request_id)
        self._partial_hit_reqs.pop(request_id, None)
        return returned + new_blocks

    def pop_blocks_for_free(self, request_id: str) -> list[HybridBlock]:
        if self.align:
            self._allocated_block_reqs.discard(request_id)
            self.last_state_block_idx.pop(request_id, None)
            self._num_retired_blocks.pop(request_id, None)
            self._checkpoints.pop(request_id, None)
        return super().pop_blocks_for_free(request_id)

    # --- caching states ------------------------------------------------------------------------
    def cache_blocks(self, request, num_tokens, retention_interval, replay_boundaries):
        rid = request.request_id
        before = self.num_cached_block.get(rid, 0)
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries)
        after = self.num_cached_block.get(rid, 0)
        if self.align:
            key = self._cache_partial_tail_block(request, num_tokens, retention_interval)
            if key is not None:
                self.cached_blocks_this_step.add(key)
        blocks = self.req_to_blocks[rid] if after > before else ()
        for idx in range(before, after):
            if not blocks[idx].is_null and blocks[idx].block_hash is not None:
                self.cached_blocks_this_step.add(blocks[idx].block_hash)

    def new_step_starts(self) -> None:
        self.cached_blocks_this_step.clear()

    def _cache_partial_tail_block(self, request: CacheRequest, num_tokens: int,
                                  retention_interval: int | None) -> bytes | None:
        """Keys the checkpoint block this step exported (or evicts it when no later request
        can resume there), else the block holding the prompt's last hash-block boundary."""
        rid = request.request_id
        checkpoint = self._checkpoints.get(rid)
        if checkpoint is not None:
            position, idx = checkpoint
            block = self.req_to_blocks[rid][idx]
            is_prompt = position == get_mamba_prefill_checkpoint_position(
                request.num_prompt_tokens, self.cache_hit_alignment_tokens)
            retained = False
            if position % self.block_size == 0:
                b = position // self.block_size - 1
                mask = self.reachable_block_mask(b, b + 1, self.cache_hit_alignment_tokens,
                                                 self.kv_cache_spec, retention_interval, ())
                retained = mask is None or mask[0]
            if not is_prompt and not retained and position != request.shared_prefix_boundary:
                self.block_pool._maybe_evict_cached_block(block)  # a transient state
                return None
            if block.block_hash_num_tokens == position:
                return None
            return self.block_pool.cache_partial_block(request, block, position,
                                                       self.kv_cache_group_id, self.block_size,
                                                       replace_existing_hashes=True)
        hbs = self.block_pool.hash_block_size
        if num_tokens <= 0 or num_tokens % hbs:
            return None
        if num_tokens != get_mamba_prefill_checkpoint_position(request.num_prompt_tokens, hbs):
            return None
        idx = cdiv(num_tokens, self.block_size) - 1
        blocks = self.req_to_blocks[rid]
        if idx >= len(blocks) or blocks[idx].is_null:
            return None
        source = blocks[idx]
        if source.block_hash_num_tokens == num_tokens:
            return None
        key = self.block_pool.cache_partial_block(request, source, num_tokens,
                                                  self.kv_cache_group_id, self.block_size)
        if key is not None and num_tokens % self.block_size:
            self._partial_hit_reqs[rid] = (idx, source)
            self.num_cached_block[rid] = idx
        return key
