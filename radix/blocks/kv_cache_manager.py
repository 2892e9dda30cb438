"""vLLM 0.33's KVCacheManager over its hybrid coordinator (v1/core/kv_cache_manager.py), with the
one scheduler rule the hybrid cache depends on (v1/core/sched/scheduler.py
`_mamba_block_aligned_split`): where a Mamba prefill chunk must end.

`get_computed_blocks` asks the coordinator for the hit every group agrees on (capped at
num_tokens - 1) and, when a group cached a longer shared prefix than the agreed hit
(`num_uncached_common_prefix_tokens` > 0), pins the junction: `shared_prefix_boundary` = hit +
uncached, which the scheduler stores on the request. `mamba_block_aligned_split` then ends a
prefill chunk there (block-floored), so the Mamba state at the junction is computed and cached:
the next sibling hits it. `allocate_slots` is vLLM's: free what the window passed, count, adopt
the hits, allocate, cache. A request is our `Req`; the manager keeps what vLLM's Request holds
for the cache (hashes at `hash_block_size`, computed tokens, the junction) while it is live.
Leaves out: KV connectors and external tokens, lookahead/EAGLE, watermark, prompt logprobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from radix.blocks.hashing import BlockHasher, hash_request_tokens
from radix.blocks.hybrid_coordinator import get_kv_cache_coordinator
from radix.blocks.hybrid_pool import CacheRequest, HybridBlock
from radix.blocks.hybrid_specs import (
    KVCacheGroupSpec,
    MambaSpec,
    get_mamba_prefill_checkpoint_position,
    is_mamba_prefill_checkpoint_valid,
    resolve_block_sizes,
)
from radix.events import BlockStored, Event, EventSink
from radix.request import Req


@dataclass(frozen=True, slots=True)
class HybridLookedUp(Event):
    """get_computed_blocks: the agreed hit and how each group saw it."""

    rid: str
    num_tokens: int
    hit_tokens: int  # the length every group agreed on
    group_hits: tuple[int, ...]  # each group's own longest hit, alone
    num_uncached_common_prefix_tokens: int
    shared_prefix_boundary: int  # the junction pinned (0: none)


@dataclass(frozen=True, slots=True)
class BlockTableChanged(Event):
    """One group's block table of one request after a call (0 = the null block)."""

    rid: str
    group_idx: int
    block_ids: tuple[int, ...]


class HybridHit(NamedTuple):
    blocks: tuple[list[HybridBlock], ...]  # per group, null blocks where a group needs none
    num_computed_tokens: int  # the agreed hit
    shared_prefix_boundary: int  # hit + uncached when a group lags, else 0
    num_uncached_common_prefix_tokens: int  # longest single-group hit on the way - the hit


class HybridLookup(NamedTuple):
    rid: str
    num_tokens: int  # prompt + output at lookup
    hit_tokens: int
    group_hits: tuple[int, ...]  # each group alone (vLLM's find_longest_cache_hit_per_group)
    num_uncached_common_prefix_tokens: int
    shared_prefix_boundary: int


class KVCacheManager:
    """vLLM 0.33's block cache for any layout of KV-cache groups (see the module docstring).

    >>> from radix.blocks.hybrid_specs import FullAttentionSpec
    >>> g = [KVCacheGroupSpec(("f",), FullAttentionSpec(4)), KVCacheGroupSpec(("m",), MambaSpec(4))]
    >>> m = KVCacheManager(g, num_blocks=16); r = Req("r1", list(range(10)))
    >>> hit = m.get_computed_blocks(r); m.mamba_block_aligned_split(r, 10)  # the state at 8
    8
    >>> _ = m.allocate_slots(r, 8, hit); _ = m.allocate_slots(r, 2); m.free(r)
    >>> m.get_computed_blocks(Req("r2", list(range(10)))).num_computed_tokens
    8
    """

    def __init__(self, groups: Sequence[KVCacheGroupSpec], num_blocks: int,
                 max_model_len: int = 1 << 20, max_in_flight_tokens: int | None = None,
                 enable_caching: bool = True, enable_kv_cache_events: bool = False,
                 prefix_cache_retention_interval: int | None = 0,
                 prefix_match_unit: int | None = None,
                 hash_algo: str | BlockHasher = "radixlens",
                 lora_ids: dict[str, int] | None = None, sink: EventSink | None = None) -> None:
        specs = [g.kv_cache_spec for g in groups]
        if not specs:
            raise ValueError("a KV cache needs at least one group")
        self.scheduler_block_size, self.hash_block_size = resolve_block_sizes(
            specs, enable_caching, prefix_match_unit)
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.coordinator = get_kv_cache_coordinator(
            groups, num_blocks, max_model_len, max_in_flight_tokens or max_model_len,
            enable_caching, enable_kv_cache_events, self.scheduler_block_size,
            self.hash_block_size, prefix_cache_retention_interval, sink)
        self.block_pool = self.coordinator.block_pool
        self.groups = list(groups)
        self.hasher = hash_algo if isinstance(hash_algo, BlockHasher) else BlockHasher(hash_algo)
        self.lora_ids = dict(lora_ids or {})
        self.sink = sink
        self.requests: dict[str, CacheRequest] = {}
        self.lookups: list[HybridLookup] = []
        mamba = [s for s in specs if isinstance(s, MambaSpec)]
        # the scheduler's Mamba chunk rule (align mode only)
        self.need_mamba_block_aligned_split = bool(mamba) and mamba[0].mamba_cache_mode == "align"
        self.block_size = mamba[0].block_size if mamba else specs[0].block_size
        self.mamba_has_prefill_checkpoint_blocks = bool(mamba) and all(
            s.num_prefill_checkpoint_blocks > 0 for s in mamba)
        self.mamba_prefill_checkpoint_alignment = (mamba[0].prefill_checkpoint_alignment
                                                   if mamba else None)
        self.mamba_partial_cache_hit = (self.need_mamba_block_aligned_split
                                        and self.hash_block_size < self.block_size
                                        and self.coordinator.enable_partial_hash_hits)

    # --- a request's cache view ----------------------------------------------------------------
    def request(self, req: Req) -> CacheRequest:
        """The request as the cache reads it, its hashes extended to its tokens so far."""
        state = self.requests.get(req.rid)
        if state is None:
            state = self.requests[req.rid] = CacheRequest(
                req.rid, list(req.all_ids), len(req.origin_input_ids), lora_name=req.extra_key,
                lora_id=self.lora_ids.get(req.extra_key), cache_salt=req.cache_salt)
        elif len(state.all_token_ids) != state.num_prompt_tokens + len(req.output_ids):
            state.all_token_ids.extend(req.output_ids[len(state.all_token_ids)
                                                      - state.num_prompt_tokens:])
        tokens = state.all_token_ids
        if len(state.block_hashes) < len(tokens) // self.hash_block_size:
            hash_request_tokens(tokens, self.hash_block_size, req.extra_key, req.cache_salt,
                                state.block_hashes, self.hasher)
        return state

    # --- the calls ---------------------------------------------------------------------------
    def get_computed_blocks(self, req: Req) -> HybridHit:
        """The hit of a request that holds no blocks (at most num_tokens - 1 tokens), and its
        junction. Changes no block."""
        state = self.request(req)
        groups = len(self.groups)
        if not self.enable_caching:
            hit = HybridHit(tuple([] for _ in range(groups)), 0, 0, 0)
            group_hits = (0,) * groups
        else:
            blocks, n, uncached = self.coordinator.find_longest_cache_hit(
                state.block_hashes, state.num_tokens - 1)
            hit = HybridHit(blocks, n, n + uncached if uncached else 0, uncached)
            group_hits = (self.find_longest_cache_hit_per_group(state) if groups > 1
                          else (n,))
        state.shared_prefix_boundary = hit.shared_prefix_boundary  # the scheduler's admission
        record = HybridLookup(req.rid, state.num_tokens, hit.num_computed_tokens, group_hits,
                              hit.num_uncached_common_prefix_tokens, hit.shared_prefix_boundary)
        self.lookups.append(record)
        if self.sink is not None:
            self.sink.emit(HybridLookedUp(*record))
        return hit

    def find_longest_cache_hit_per_group(self, state: CacheRequest) -> tuple[int, ...]:
        """Each group's own hit, as if it were alone (vLLM's per-group lookup)."""
        coord = self.coordinator
        out = [0] * len(self.groups)
        for gid, manager in enumerate(coord.single_type_managers):
            alignment = getattr(coord, "_cache_hit_alignment_tokens", manager.block_size)
            _, n = type(manager).find_longest_cache_hit(
                state.block_hashes, state.num_tokens - 1, [gid], coord.block_pool,
                manager.kv_cache_spec, alignment)
            out[gid] = n
        return tuple(out)

    def allocate_slots(self, req: Req, num_new_tokens: int, hit: HybridHit | None = None,
                       full_sequence_must_fit: bool = False
                       ) -> tuple[list[HybridBlock], ...] | None:
        """Slots for `num_new_tokens` more tokens after the computed ones (plus `hit`, a new
        request's hit, adopted here); caches what is full. Returns the new blocks per group,
        or None (nothing allocated) when the pool is short. On success the request's computed
        tokens advance, as vLLM's scheduler advances them after scheduling."""
        state = self.request(req)
        num_hit = hit.num_computed_tokens if hit is not None else 0
        if num_new_tokens == 0 and num_hit == 0:
            raise ValueError(f"request {req.rid!r}: num_new_tokens must be > 0 with no hit")
        adopted = hit.blocks if hit is not None and any(hit.blocks) else None
        empty = tuple(() for _ in self.groups)
        coord = self.coordinator
        num_local = state.num_computed_tokens + num_hit
        total = min(num_local, self.max_model_len)
        if num_local + num_new_tokens > state.num_tokens:
            raise ValueError(f"request {req.rid!r}: {num_new_tokens} new tokens with {num_local} "
                             f"computed exceed its {state.num_tokens} tokens")
        prefill_end = max(state.num_prompt_tokens, state.num_tokens - 1)
        free = self.block_pool.get_num_free_blocks()
        if full_sequence_must_fit:
            full = min(state.num_tokens, self.max_model_len)
            if coord.get_num_blocks_to_allocate(req.rid, full, adopted or empty, total, num_local,
                                                full, True, prefill_end) > free:
                return None
        self._begin("allocate_slots", req.rid, f"{num_new_tokens} new tokens")
        before = self._tables(req.rid)
        main = total + num_new_tokens
        need_slot = min(main, self.max_model_len)
        coord.remove_skipped_blocks(req.rid, total)
        need = coord.get_num_blocks_to_allocate(req.rid, need_slot, adopted or empty, num_local,
                                                num_local, main, prefill_end=prefill_end)
        if need > self.block_pool.get_num_free_blocks():
            self._end("allocate_slots", req.rid, before)
            return None
        if adopted is not None:
            coord.allocate_new_computed_blocks(req.rid, adopted, num_local)
        new_blocks = coord.allocate_new_blocks(req.rid, need_slot, main)
        if self.enable_caching:
            coord.cache_blocks(state, min(total + num_new_tokens, state.num_tokens))
        state.num_computed_tokens = total + num_new_tokens
        self._end("allocate_slots", req.rid, before)
        return new_blocks

    def free(self, req: Req) -> None:
        """Every group's blocks back to the pool (each group's last block first); the request's
        cache view is dropped (a preempted request starts again from a lookup)."""
        self._begin("free", req.rid)
        before = self._tables(req.rid)
        self.coordinator.free(req.rid)
        self.requests.pop(req.rid, None)
        self._end("free", req.rid, before)

    def mamba_block_aligned_split(self, req: Req, num_new_tokens: int,
                                  num_new_local_computed_tokens: int = 0,
                                  max_num_scheduled_tokens: int = 8192,
                                  long_prefill_token_threshold: int = 0) -> int:
        """The scheduler's cut of a prefill chunk (align mode): chunks end on block boundaries
        (the last one excepted); stop at the last cacheable boundary, at the prompt's checkpoint
        when the kernel cannot export it, and at the junction (block-floored).

        Arithmetic: 2,200-token prompt, block 576, junction 1,152, nothing computed -> 1,152.
        """
        if not self.need_mamba_block_aligned_split:
            return num_new_tokens
        state = self.request(req)
        start = state.num_computed_tokens + num_new_local_computed_tokens
        prefill_end = max(state.num_prompt_tokens, state.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tokens
        bs, hbs = self.block_size, self.hash_block_size
        last_cache_position = get_mamba_prefill_checkpoint_position(state.num_tokens, bs)
        end = start + num_new_tokens
        position = get_mamba_prefill_checkpoint_position(
            prefill_end, hbs if self.mamba_partial_cache_hit else bs)
        internal = (self.mamba_has_prefill_checkpoint_blocks and end >= prefill_end
                    and is_mamba_prefill_checkpoint_valid(
                        start, end, position, hbs, bs, self.mamba_prefill_checkpoint_alignment))
        if internal:
            last_cache_position = 0
        if end < prefill_end:
            max_prefill = max_num_scheduled_tokens
            if long_prefill_token_threshold > 0:
                max_prefill = min(max_prefill, long_prefill_token_threshold)
            aligned_end = end // bs * bs
            if aligned_end > start or bs <= max_prefill:
                end = aligned_end
        tail = (get_mamba_prefill_checkpoint_position(state.num_prompt_tokens, hbs)
                if self.mamba_partial_cache_hit and not internal else 0)
        junction = state.shared_prefix_boundary
        stops = ((start // bs + 1) * bs if start % bs and not internal else 0,
                 last_cache_position,
                 tail if last_cache_position < tail < state.num_prompt_tokens else 0,
                 start + (junction - start) // bs * bs if start < junction < end else 0)
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    # --- the rest of vLLM's surface ------------------------------------------------------------
    def new_step_starts(self) -> None:
        self.coordinator.new_step_starts()

    def take_kv_cache_block_copies(self) -> tuple[list[tuple[int, int]], list[HybridBlock]]:
        """This step's copy-on-write copies (source id, copy id) and the blocks held for them,
        which the caller frees once the copies ran (vLLM's scheduler does, after the step)."""
        pairs = [p for m in self.coordinator.single_type_managers
                 for p in m.take_pending_cow_copies()]
        return [(s.block_id, d.block_id) for s, d in pairs], [b for p in pairs for b in p]

    def reset_prefix_cache(self) -> bool:
        return self.coordinator.reset_prefix_cache()

    def get_block_ids(self, rid: str) -> tuple[list[int], ...]:
        return tuple([b.block_id for b in g] for g in self.coordinator.get_blocks(rid))

    def take_events(self) -> list[Event]:
        """The KV events since the last call, each BlockStored annotated with its group's kind
        and sliding window (vLLM's KVCacheManager.take_events)."""
        out = []
        for event in self.block_pool.take_events():
            if type(event) is BlockStored and event.group_idx is not None:
                spec = self.groups[event.group_idx].kv_cache_spec
                event = replace(event, kv_cache_spec_kind=spec.kind,
                                kv_cache_spec_sliding_window=spec.sliding_window)
            out.append(event)
        return out

    def check_invariants(self) -> None:
        """The pool's invariants, and every block's ref_cnt == the tables holding it."""
        self.block_pool.check_invariants()
        refs: dict[int, int] = {}
        for manager in self.coordinator.single_type_managers:
            for blocks in manager.req_to_blocks.values():
                for b in blocks:
                    if not b.is_null:
                        refs[b.block_id] = refs.get(b.block_id, 0) + 1
            for pair in manager._pending_cow_copies:
                for b in pair:
                    refs[b.block_id] = refs.get(b.block_id, 0) + 1
        for b in self.block_pool.blocks[1:]:
            assert b.ref_cnt == refs.get(b.block_id, 0), (
                f"block {b.block_id}: ref_cnt {b.ref_cnt}, held {refs.get(b.block_id, 0)}")

    # --- UI events -----------------------------------------------------------------------------
    def _tables(self, rid: str) -> tuple[tuple[int, ...], ...] | None:
        if self.sink is None:
            return None
        return tuple(tuple(ids) for ids in self.get_block_ids(rid))

    def _begin(self, op: str, rid: str, detail: str = "") -> None:
        self.block_pool.begin_step(op, rid, detail)

    def _end(self, op: str, rid: str, before: tuple | None) -> None:
        if before is not None:
            for gid, ids in enumerate(self._tables(rid)):
                if ids != before[gid]:
                    self.sink.emit(BlockTableChanged(rid, gid, ids))
        self.block_pool.end_step(op)
