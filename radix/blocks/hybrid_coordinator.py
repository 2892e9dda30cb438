"""vLLM 0.33's KV-cache coordinators (v1/core/kv_cache_coordinator.py): the single-type managers
of a model's KV-cache groups behind one interface, and how a hit is agreed among them.

`find_longest_cache_hit` (`HybridKVCacheCoordinator`) is a fixed point: starting from the longest
hit allowed (num_tokens - 1), each spec group (groups with equal specs looked up together, full
attention first) either accepts the candidate length or lowers it, and the loop restarts until no
group lowers it; full attention, downward-closed, is looked up once and only trimmed afterwards.
With exactly full attention plus one other kind, one pass is enough (vLLM stops there). The
longest length any group accepted on the way, minus the agreed hit, is
`num_uncached_common_prefix_tokens`: a shared prefix that a sparse group (Mamba, sliding window)
has not cached. One group: `UnitaryKVCacheCoordinator`; caching off:
`KVCacheCoordinatorNoPrefixCache`.
Leaves out: EAGLE drops, DCP/PCP, cross-attention, external hits, per-group connector lookups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radix.blocks.hybrid_pool import CacheRequest, HybridBlock, HybridBlockPool
from radix.blocks.hybrid_specs import (
    FullAttentionSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
    partial_hash_hits_enabled,
)
from radix.blocks.mamba_manager import MambaManager
from radix.blocks.single_type import (
    FullAttentionManager,
    SingleTypeKVCacheManager,
    SlidingWindowManager,
    cdiv,
)
from radix.events import EventSink


class SpecGroup(NamedTuple):
    spec: KVCacheSpec  # shared by every group below
    group_ids: list[int]  # looked up together: a hit must be cached in all of them
    manager_cls: type[SingleTypeKVCacheManager]


def get_manager_for_kv_cache_spec(spec: KVCacheSpec, max_in_flight_tokens: int,
                                  max_model_len: int, **kwargs) -> SingleTypeKVCacheManager:
    """The manager of one group; a sliding window gets vLLM's admission cap (blocks a request
    holds at most while its window slides)."""
    if isinstance(spec, SlidingWindowSpec):
        tokens = min(spec.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        return SlidingWindowManager(spec, max_admission_blocks_per_request=cdiv(
            tokens, spec.block_size) + 1, **kwargs)
    cls = MambaManager if isinstance(spec, MambaSpec) else FullAttentionManager
    return cls(spec, **kwargs)


class KVCacheCoordinator:
    """The managers of every group over one HybridBlockPool (see the module docstring)."""

    enable_partial_hash_hits = False

    def __init__(self, groups: Sequence[KVCacheGroupSpec], num_blocks: int, max_model_len: int,
                 max_in_flight_tokens: int, enable_caching: bool, enable_kv_cache_events: bool,
                 scheduler_block_size: int, hash_block_size: int,
                 retention_interval: int | None = 0, sink: EventSink | None = None) -> None:
        if any(scheduler_block_size % g.kv_cache_spec.block_size for g in groups) or (
                scheduler_block_size % hash_block_size):
            raise ValueError(f"scheduler block {scheduler_block_size} must be a multiple of the "
                             f"hash block {hash_block_size} and of every group's block")
        self.groups = list(groups)
        self.scheduler_block_size = scheduler_block_size
        self.hash_block_size = hash_block_size
        self.block_pool = HybridBlockPool(num_blocks, enable_caching, hash_block_size,
                                          enable_kv_cache_events, sink)
        self.single_type_managers = tuple(
            get_manager_for_kv_cache_spec(
                g.kv_cache_spec, max_in_flight_tokens, max_model_len, block_pool=self.block_pool,
                enable_caching=enable_caching, kv_cache_group_id=i,
                scheduler_block_size=scheduler_block_size)
            for i, g in enumerate(self.groups))
        self.retention_interval = retention_interval
        sparse = any(isinstance(g.kv_cache_spec, SlidingWindowSpec | MambaSpec) for g in groups)
        if retention_interval is not None and (
                retention_interval < 0 or retention_interval % scheduler_block_size
                or (retention_interval and not sparse)):
            raise ValueError(f"prefix_cache_retention_interval {retention_interval}: must be 0, "
                             f"None, or a multiple of the scheduler block "
                             f"({scheduler_block_size}) on a model with a sliding-window or "
                             f"Mamba group")

    # --- allocation ----------------------------------------------------------------------------
    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[Sequence[HybridBlock]],
                                   total_computed_tokens: int, num_local_computed_tokens: int,
                                   num_tokens_main_model: int, apply_admission_cap: bool = False,
                                   prefill_end: int = 0) -> int:
        if self.retention_interval != 0:  # dense retention: every chunk keeps a state
            prefill_end = 0
        return sum(m.get_num_blocks_to_allocate(
            request_id, num_tokens, new_computed_blocks[i], total_computed_tokens,
            num_local_computed_tokens, num_tokens_main_model, apply_admission_cap, prefill_end)
            for i, m in enumerate(self.single_type_managers))

    def allocate_new_computed_blocks(self, request_id: str,
                                     new_computed_blocks: Sequence[Sequence[HybridBlock]],
                                     num_local_computed_tokens: int) -> None:
        if any(request_id in m.num_cached_block for m in self.single_type_managers):
            assert all(not blocks for blocks in new_computed_blocks)
            return
        for i, manager in enumerate(self.single_type_managers):
            manager.add_local_computed_blocks(request_id, new_computed_blocks[i],
                                              num_local_computed_tokens)

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int) -> tuple[list[HybridBlock], ...]:
        return tuple(m.allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
                     for m in self.single_type_managers)

    # --- caching -------------------------------------------------------------------------------
    def get_num_cacheable_tokens(self, num_computed_tokens: int, group_id: int) -> int:
        return num_computed_tokens

    def cache_blocks(self, request: CacheRequest, num_computed_tokens: int) -> None:
        """Each group caches what is full and reachable; a later request replaying this prompt
        resumes at num_prompt_tokens - 1 (its replay boundary)."""
        boundaries = (request.num_prompt_tokens - 1,)
        for gid, manager in enumerate(self.single_type_managers):
            if manager.enable_caching:
                manager.cache_blocks(request, self.get_num_cacheable_tokens(num_computed_tokens,
                                                                            gid),
                                     self.retention_interval, boundaries)

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_cache_hit_length: int
                               ) -> tuple[tuple[list[HybridBlock], ...], int, int]:
        """(hit blocks per group, hit length, num_uncached_common_prefix_tokens)."""
        raise NotImplementedError

    # --- freeing -------------------------------------------------------------------------------
    def free(self, request_id: str) -> None:
        for manager in self.single_type_managers:
            manager.free(request_id)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        for manager in self.single_type_managers:
            manager.remove_skipped_blocks(request_id, processed_computed_tokens)

    def get_blocks(self, request_id: str) -> tuple[list[HybridBlock], ...]:
        return tuple(m.req_to_blocks.get(request_id) or [] for m in self.single_type_managers)

    def reset_prefix_cache(self) -> bool:
        return self.block_pool.reset_prefix_cache()

    def new_step_starts(self) -> None:
        for manager in self.single_type_managers:
            manager.new_step_starts()


class KVCacheCoordinatorNoPrefixCache(KVCacheCoordinator):
    """Prefix caching off: every lookup is empty, nothing is cached."""

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        return tuple([] for _ in self.single_type_managers), 0, 0


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """One KV-cache group (e.g. Llama-3-8B: full attention only): its manager decides alone."""

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        manager = self.single_type_managers[0]
        blocks, hit = type(manager).find_longest_cache_hit(
            block_hashes, max_cache_hit_length, [0], self.block_pool, manager.kv_cache_spec,
            manager.block_size)
        return blocks, hit, 0


class HybridKVCacheCoordinator(KVCacheCoordinator):
    """Several groups; a hit must be one length every group agrees on (see the module
    docstring).

    >>> g = [KVCacheGroupSpec(("full",), FullAttentionSpec(4)),
    ...      KVCacheGroupSpec(("mamba",), MambaSpec(4))]
    >>> c = HybridKVCacheCoordinator(g, 8, 64, 64, True, False, 4, 4)
    >>> c.find_longest_cache_hit([b"x", b"y"], 7)
    (([], []), 0, 0)
    """

    def __init__(self, *args, allow_partial_hash_hits: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        specs = [g.kv_cache_spec for g in self.groups]
        self.enable_partial_hash_hits = allow_partial_hash_hits and partial_hash_hits_enabled(
            specs, self.hash_block_size)
        for manager in self.single_type_managers:
            manager.cache_hit_alignment_tokens = self._cache_hit_alignment_tokens
        self.attention_groups: list[SpecGroup] = []
        for i, g in enumerate(self.groups):
            cls = type(self.single_type_managers[i])
            for group in self.attention_groups:
                if group.spec == g.kv_cache_spec and group.manager_cls is cls:
                    group.group_ids.append(i)
                    break
            else:
                self.attention_groups.append(SpecGroup(g.kv_cache_spec, [i], cls))
        # full attention first: its left-to-right scan bounds the others
        self.attention_groups.sort(key=lambda g: not isinstance(g.spec, FullAttentionSpec))

    @property
    def _cache_hit_alignment_tokens(self) -> int:
        return self.hash_block_size if self.enable_partial_hash_hits else self.scheduler_block_size

    def get_num_cacheable_tokens(self, num_computed_tokens: int, group_id: int) -> int:
        if self.enable_partial_hash_hits:
            return num_computed_tokens
        return num_computed_tokens // self.scheduler_block_size * self.scheduler_block_size

    @staticmethod
    def _stop(converged: bool, simple: bool) -> bool:
        """The loop's rule: stop when no group lowered the candidate, or after one pass when
        the groups are full attention plus one other kind (its one check is enough)."""
        return converged or simple

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        """The fixed point; see the module docstring. Changes nothing."""
        num_groups = len(self.groups)
        hit_length = max_cache_hit_length
        longest = 0
        blocks_by_group: list[list[HybridBlock] | None] = [None] * num_groups
        length_by_group = [0] * num_groups
        simple = (len(self.attention_groups) == 2
                  and isinstance(self.attention_groups[0].spec, FullAttentionSpec))
        while True:
            curr = hit_length
            for spec, group_ids, cls in self.attention_groups:
                first = group_ids[0]
                if isinstance(spec, FullAttentionSpec) and blocks_by_group[first] is not None:
                    curr = min(curr, length_by_group[first])  # downward-closed: trim only
                    continue
                blocks, curr = cls.find_longest_cache_hit(
                    block_hashes, curr, group_ids, self.block_pool, spec,
                    self._cache_hit_alignment_tokens)
                for gid, group_blocks in zip(group_ids, blocks):
                    blocks_by_group[gid], length_by_group[gid] = group_blocks, curr
                longest = max(longest, curr)
            converged = curr >= hit_length
            if not converged:
                hit_length = curr
            if self._stop(converged, simple):
                break
        for spec, group_ids, _ in self.attention_groups:
            if isinstance(spec, FullAttentionSpec):
                n = cdiv(hit_length, self.single_type_managers[group_ids[0]].block_size)
                for gid in group_ids:
                    if blocks_by_group[gid] is not None:
                        del blocks_by_group[gid][n:]
                        length_by_group[gid] = hit_length
        return (tuple(b if b is not None else [] for b in blocks_by_group), hit_length,
                longest - hit_length)


def get_kv_cache_coordinator(groups: Sequence[KVCacheGroupSpec], num_blocks: int,
                             max_model_len: int, max_in_flight_tokens: int, enable_caching: bool,
                             enable_kv_cache_events: bool, scheduler_block_size: int,
                             hash_block_size: int, retention_interval: int | None = 0,
                             sink: EventSink | None = None) -> KVCacheCoordinator:
    """The coordinator vLLM picks: no prefix cache, one group, or the hybrid fixed point."""
    args = (groups, num_blocks, max_model_len, max_in_flight_tokens, enable_caching,
            enable_kv_cache_events, scheduler_block_size, hash_block_size, retention_interval,
            sink)
    if not enable_caching:
        return KVCacheCoordinatorNoPrefixCache(*args)
    if len(groups) == 1:
        return UnitaryKVCacheCoordinator(*args)
    return HybridKVCacheCoordinator(*args)

