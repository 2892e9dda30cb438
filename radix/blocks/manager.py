"""A request-level API over BlockPool, after vLLM v1's KVCacheManager (kv_cache_manager.py and
single_type_kv_cache_manager.py): look up, allocate, cache blocks as they fill, free.

Lookup takes the longest run of cached full blocks from the start, stops at the first miss, and is
capped at num_tokens - 1 tokens (a fully cached prompt recomputes its last block). Each lookup
leaves a `LookupRecord` (hit length, where it stopped and why). `allocate_slots` treats the
tokens it allocates for as computed (our scheduler runs them right away).
Leaves out: chunked-prefill lookahead, speculative tokens, preemption. Snapshot: block_snapshot.py.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from radix.blocks.hashing import (
    BlockHash,
    BlockHasher,
    HashMemo,
    block_extra_keys,
    hash_request_tokens,
)
from radix.blocks.pool import BlockPool, KVCacheBlock
from radix.blocks.snapshot import BlockPoolSnapshot, take_snapshot, unreachable_block_ids
from radix.events import PrefixLookedUp
from radix.request import Req


class ComputedBlocks(NamedTuple):
    blocks: list[KVCacheBlock]  # cache hits, in chain order (not yet touched)
    num_computed_tokens: int  # len(blocks) * block_size


class LookupRecord(NamedTuple):
    rid: str
    num_tokens: int  # the request's tokens at lookup (prompt + output so far)
    hit_blocks: int  # cached blocks matched from the start
    hit_tokens: int  # hit_blocks * block_size
    stop_block: int  # index of the first block not matched
    reason: str  # "miss" (stop_block not cached) | "cap" (would reach the last token) |
    #              "partial" (stop_block is not full) | "disabled" (caching off)


class _ReqBlocks:
    """What the manager holds for one live request."""

    __slots__ = ("blocks", "block_hashes", "num_computed_tokens", "num_cached_blocks")

    def __init__(self) -> None:
        self.blocks: list[KVCacheBlock] = []  # the block table, in token order
        self.block_hashes: list[BlockHash] = []  # hashes of the full blocks seen so far
        self.num_computed_tokens = 0
        self.num_cached_blocks = 0  # blocks[:n] carry their hash in the pool


class BlockCacheManager:
    """Blocks for requests, with prefix caching.

    >>> m = BlockCacheManager(BlockPool(8, block_size=4)); r = Req("r1", list(range(10)))
    >>> hit = m.get_computed_blocks(r); [b.block_id for b in m.allocate_slots(r, 10, hit)]
    [1, 2, 3]
    >>> m.free(r); r2 = Req("r2", list(range(9))); m.get_computed_blocks(r2).num_computed_tokens
    8
    """

    def __init__(self, pool: BlockPool, hash_algo: str | BlockHasher | None = None,
                 lora_ids: dict[str, int] | None = None, hash_memo: bool = False) -> None:
        self.pool = pool
        self.block_size = pool.block_size
        # how blocks are hashed: the pool's unless given (radix/blocks/hashing.py)
        self.hasher = pool.hasher if hash_algo is None else (
            hash_algo if isinstance(hash_algo, BlockHasher) else BlockHasher(hash_algo))
        self.lora_ids = dict(lora_ids or {})  # LoRA name -> vLLM's adapter id, for BlockStored
        self.requests: dict[str, _ReqBlocks] = {}  # rid -> its blocks, while live
        self.lookups: list[LookupRecord] = []  # one per get_computed_blocks call
        # a request's hashes reused from earlier prompts with the same prefix (HashMemo):
        # the same hashes, computed once, for big traces
        self.memo = HashMemo(self.block_size) if hash_memo else None

    # --- hashing (vLLM hashes when the request arrives) ----------------------------------------
    def hash_request(self, req: Req) -> list[BlockHash]:
        """Hashes of every full block of req.all_ids, computed once and extended as it grows."""
        state = self.requests.get(req.rid)
        if state is None:
            state = self.requests[req.rid] = _ReqBlocks()
        tokens = req.origin_input_ids + req.output_ids
        if self.memo is not None and not state.block_hashes:
            state.block_hashes = self.memo.hashes(
                tokens, (req.extra_key, req.cache_salt),
                lambda known: hash_request_tokens(tokens, self.block_size, req.extra_key,
                                                  req.cache_salt, known, self.hasher))
            return state.block_hashes
        return hash_request_tokens(tokens, self.block_size, req.extra_key, req.cache_salt,
                                   state.block_hashes, self.hasher)

    # --- the three calls -----------------------------------------------------------------------
    def get_computed_blocks(self, req: Req) -> ComputedBlocks:
        """The cached prefix of a request that holds no blocks yet. Changes no block."""
        sink = self.pool._sink
        if sink is not None:
            self.pool.begin_step("get_computed_blocks", req.rid)
        hashes = self.hash_request(req)
        if self.requests[req.rid].blocks:
            raise ValueError(f"request {req.rid!r} already holds blocks; look up before allocating")
        num_tokens = len(req.origin_input_ids) + len(req.output_ids)
        max_blocks = (num_tokens - 1) // self.block_size if num_tokens else 0
        hits: list[KVCacheBlock] = []
        if not self.pool.enable_caching:
            reason = "disabled"
        else:
            cache = self.pool.cached_block_hash_to_block
            reason = "partial"
            for block_hash in hashes[:max_blocks]:
                entry = cache.get(block_hash)
                if entry is None:
                    reason = "miss"
                    break
                hits.append(entry if type(entry) is KVCacheBlock else next(iter(entry.values())))
            else:
                if len(hashes) > max_blocks:
                    reason = "cap"
        n = len(hits)
        record = LookupRecord(req.rid, num_tokens, n, n * self.block_size, n, reason)
        self.lookups.append(record)
        if sink is not None:
            sink.emit(PrefixLookedUp(req.rid, n, n * self.block_size, n, reason))
            self.pool.end_step("get_computed_blocks")
        return ComputedBlocks(hits, n * self.block_size)

    def allocate_slots(
        self, req: Req, num_new_tokens: int, new_computed: ComputedBlocks | None = None
    ) -> list[KVCacheBlock] | None:
        """Slots for `num_new_tokens` more tokens after the computed ones (plus the hits in
        `new_computed`, touched here); caches every block that is full afterwards. Returns the
        newly taken blocks, or None (nothing changed) when the pool is short.

        Arithmetic: 100 computed tokens, 30 new, block_size 16 -> ceil(130/16) = 9 blocks.
        """
        state = self.requests.get(req.rid) or self.requests.setdefault(req.rid, _ReqBlocks())
        hits = new_computed.blocks if new_computed is not None else []
        if hits and state.blocks:
            raise ValueError(f"request {req.rid!r}: computed blocks given after allocation")
        num_computed = state.num_computed_tokens + len(hits) * self.block_size
        num_tokens = len(req.origin_input_ids) + len(req.output_ids)
        if num_new_tokens < 0 or num_computed + num_new_tokens > num_tokens:
            raise ValueError(f"request {req.rid!r}: num_new_tokens {num_new_tokens} with "
                             f"{num_computed} computed exceeds its {num_tokens} tokens")
        total = num_computed + num_new_tokens
        num_new_blocks = max(0, -(-total // self.block_size) - len(state.blocks) - len(hits))
        num_evictable_hits = [b.ref_cnt for b in hits].count(0) if hits else 0
        pool = self.pool
        if num_new_blocks + num_evictable_hits > pool.free_block_queue.num_free_blocks:
            return None
        sink = pool._sink
        if sink is not None:
            pool.begin_step("allocate_slots", req.rid, f"{num_new_tokens} new tokens")
        if hits:
            pool.touch(hits)
            state.blocks.extend(hits)
            state.num_cached_blocks = len(hits)
        new_blocks = pool.get_new_blocks(num_new_blocks) if num_new_blocks else []
        state.blocks.extend(new_blocks)
        state.num_computed_tokens = total
        self._cache_blocks(req, state, total)
        if sink is not None:
            pool.end_step("allocate_slots")
        return new_blocks

    def _cache_blocks(self, req: Req, state: _ReqBlocks, num_tokens: int) -> None:
        num_full = num_tokens // self.block_size
        if num_full <= state.num_cached_blocks or not self.pool.enable_caching:
            return
        token_ids: list[int] = []
        if len(state.block_hashes) < num_full or self.pool._sink is not None:
            token_ids = req.origin_input_ids + req.output_ids
            hash_request_tokens(token_ids[:num_full * self.block_size], self.block_size,
                                req.extra_key, req.cache_salt, state.block_hashes, self.hasher)
        keys = ()
        if self.pool._sink is not None:
            keys = [block_extra_keys(i, req.extra_key, req.cache_salt) for i in range(num_full)]
        self.pool.cache_full_blocks(state.blocks, state.block_hashes, state.num_cached_blocks,
                                    num_full, token_ids, req.extra_key, keys,
                                    self.lora_ids.get(req.extra_key))
        state.num_cached_blocks = num_full

    def free(self, req: Req) -> None:
        """Releases the request's blocks, last block first (it is the least likely to be shared),
        so its tail is evicted before its head."""
        state = self.requests.pop(req.rid, None)
        if state is None:
            return
        if self.pool._sink is not None:
            self.pool.begin_step("free", req.rid)
            self.pool.free_blocks(reversed(state.blocks))
            self.pool.end_step("free")
        else:
            self.pool.free_blocks(reversed(state.blocks))

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()

    def get_block_ids(self, rid: str) -> tuple[list[int], ...]:
        """The request's block table, one list per KV cache group (one group here), as vLLM's
        KVCacheManager.get_block_ids; ([],) for a request that holds no blocks.

        >>> m = BlockCacheManager(BlockPool(8, block_size=4)); r = Req("r1", list(range(10)))
        >>> _ = m.allocate_slots(r, 10, m.get_computed_blocks(r)); m.get_block_ids("r1")
        ([1, 2, 3],)
        """
        state = self.requests.get(rid)
        return ([b.block_id for b in state.blocks] if state is not None else [],)

    def take_events(self) -> list:
        """The KV cache events since the last call (vLLM's KVCacheManager.take_events); the
        pool must have been made with enable_kv_cache_events=True."""
        return self.pool.take_events()

    # --- diagnostics ---------------------------------------------------------------------------
    def block_refs(self) -> Counter[int]:
        """block_id -> how many live requests hold it."""
        return Counter(b.block_id for s in self.requests.values() for b in s.blocks)

    def num_unreachable_blocks(self) -> int:
        """Cached blocks that no lookup can reach: an ancestor in their chain is not cached."""
        return len(unreachable_block_ids(self.pool))

    def check_invariants(self) -> None:
        """The pool's invariants, with ref_cnt == references held by live requests."""
        self.pool.check_invariants(self.block_refs())
        for rid, state in self.requests.items():
            for i, block in enumerate(state.blocks[:state.num_cached_blocks]):
                assert block.block_hash == state.block_hashes[i], f"{rid}: block {i} hash"

    def snapshot(self) -> BlockPoolSnapshot:
        """The pool as plain data, with each block's owning requests (radix/blocks/snapshot.py)."""
        owners: dict[int, list[str]] = {}
        for rid, state in self.requests.items():
            for block in state.blocks:
                owners.setdefault(block.block_id, []).append(rid)
        return take_snapshot(self.pool, owners, self.pool._step)
