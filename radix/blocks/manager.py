"""vLLM v1's block cache behind one interface, `BlockCacheManager` (after vLLM's KVCacheManager:
kv_cache_manager.py, single_type_kv_cache_manager.py): look up, allocate, cache full blocks, free.
Lookup takes the longest run of cached full blocks from the start, capped at num_tokens - 1 tokens
(a fully cached prompt recomputes its last block); each lookup leaves a `LookupRecord`. The pool
it is given chooses how blocks are stored: a `BlockPool` (pool.py: a KVCacheBlock each, so block
ids, KV events, snapshots) or a storage that runs the calls itself: an `ExtentPool` (here: runs
of blocks on the prefix trie of radix/tokens/runs.py, the same hits, evictions and free-queue
order for millions of tokens) or the block view's array pool (scenarios/blockbuilder.py); what
one cannot name raises `UnsupportedByStorage`. One file for the interface and the storage only it
uses; the trie sits below it with the token sequences (hashing.py and the explainer use it too).
Leaves out: lookahead, preemption.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

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
from radix.tokens.runs import PrefixTrie, TrieNode, Walk


class ComputedBlocks(NamedTuple):
    blocks: list  # the hits in chain order, not yet touched: KVCacheBlocks (BlockPool) or
    #               (segment, lo, hi) runs of first-cached carriers (ExtentPool)
    num_computed_tokens: int  # num_blocks * block_size
    num_blocks: int  # blocks matched from the start
    stop_block: int  # the first block not matched
    reason: str  # as LookupRecord.reason


class LookupRecord(NamedTuple):
    rid: str
    num_tokens: int  # the request's tokens at lookup (prompt + output so far)
    hit_blocks: int  # cached blocks matched from the start
    hit_tokens: int  # hit_blocks * block_size
    stop_block: int  # index of the first block not matched
    reason: str  # "miss" (stop_block not cached) | "cap" (would reach the last token) |
    #              "partial" (stop_block is not full) | "disabled" (caching off)


class UnsupportedByStorage(NotImplementedError):
    """The block cache's storage cannot answer this call: an ExtentPool counts blocks and names
    none (no block ids, KV events, snapshots); a BlockPool takes no prepaid blocks."""


class _ReqBlocks:
    """What the manager holds for one live request (BlockPool storage)."""

    __slots__ = ("blocks", "block_hashes", "num_computed_tokens", "num_cached_blocks")

    def __init__(self) -> None:
        self.blocks: list[KVCacheBlock] = []  # the block table, in token order
        self.block_hashes: list[BlockHash] = []  # hashes of the full blocks seen so far
        self.num_computed_tokens = 0
        self.num_cached_blocks = 0  # blocks[:n] carry their hash in the pool


class BlockCacheManager:
    """Blocks for requests, with prefix caching, over a BlockPool or an ExtentPool (or another
    storage with an ExtentPool's calls: `extents`).

    >>> m = BlockCacheManager(BlockPool(8, block_size=4)); r = Req("r1", list(range(10)))
    >>> hit = m.get_computed_blocks(r); [b.block_id for b in m.allocate_slots(r, 10, hit)]
    [1, 2, 3]
    >>> m.free(r); r2 = Req("r2", list(range(9))); m.get_computed_blocks(r2).num_computed_tokens
    8
    >>> e = BlockCacheManager(ExtentPool(8, block_size=4)); r = Req("r1", list(range(10)))
    >>> e.allocate_slots(r, 10, e.get_computed_blocks(r))  # extents: how many blocks, not which
    3
    >>> e.free(r); e.get_computed_blocks(Req("r2", list(range(9)))).num_computed_tokens
    8
    """

    def __init__(self, pool: BlockPool | ExtentPool, hash_algo: str | BlockHasher | None = None,
                 lora_ids: dict[str, int] | None = None, hash_memo: bool = False,
                 pack: Callable[[Sequence[int]], bytes | None] | None = None) -> None:
        self.pool = pool
        # the tokens' bytes for hashing, hash_request_tokens' `pack` (a compact prompt packed
        # without expanding it: scenarios/blockhashes.py pack_runs, by numpy, which radix/
        # does not import); None: struct.pack over the expanded tokens, the same bytes
        self.pack = pack
        self.block_size = pool.block_size
        # a storage that runs the calls itself (lookup, allocate, release, reserve): an
        # ExtentPool, or any pool with its methods (scenarios/blockbuilder.py ArrayPool)
        self.extents = None if isinstance(pool, BlockPool) else pool
        self.lookups: list[LookupRecord] = []  # one per get_computed_blocks call
        self.lora_ids = dict(lora_ids or {})  # LoRA name -> vLLM's adapter id, for BlockStored
        self.memo: HashMemo | None = None
        if self.extents is not None:  # extents hash nothing: hits do not depend on the hash
            if hash_memo:
                raise UnsupportedByStorage(f"{self._storage} hashes no blocks: no hash memo")
            self.hasher: BlockHasher | None = None
            self.requests: dict[str, Any] = self.extents.requests  # rid -> its extents
            return
        # how blocks are hashed: the pool's unless given (radix/blocks/hashing.py)
        self.hasher = pool.hasher if hash_algo is None else (
            hash_algo if isinstance(hash_algo, BlockHasher) else BlockHasher(hash_algo))
        self.requests = {}  # rid -> its blocks, while live
        # a request's hashes reused from earlier prompts with the same prefix (HashMemo):
        # the same hashes, computed once, for big traces
        self.memo = HashMemo(self.block_size) if hash_memo else None

    # --- counts, for either storage --------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.pool.get_num_free_blocks()

    @property
    def num_evictions(self) -> int:
        """Cached blocks popped off the free queue for reuse."""
        return self.pool.num_evictions

    @property
    def _storage(self) -> str:  # for messages: "an ExtentPool", "an ArrayPool"
        return f"an {type(self.pool).__name__}"

    # --- hashing (vLLM hashes when the request arrives) ----------------------------------------
    def hash_request(self, req: Req) -> list[BlockHash]:
        """Hashes of every full block of req.all_ids, computed once and extended as it grows."""
        if self.extents is not None:
            raise UnsupportedByStorage(f"{self._storage} hashes no blocks")
        state = self.requests.get(req.rid)
        if state is None:
            state = self.requests[req.rid] = _ReqBlocks()
        tokens = req.all_ids
        if self.memo is not None and not state.block_hashes:
            state.block_hashes = self.memo.hashes(
                tokens, (req.extra_key, req.cache_salt),
                lambda known: hash_request_tokens(tokens, self.block_size, req.extra_key,
                                                  req.cache_salt, known, self.hasher,
                                                  self.pack))
            return state.block_hashes
        return hash_request_tokens(tokens, self.block_size, req.extra_key, req.cache_salt,
                                   state.block_hashes, self.hasher, self.pack)

    # --- the three calls -----------------------------------------------------------------------
    def get_computed_blocks(self, req: Req) -> ComputedBlocks:
        """The cached prefix of a request that holds no blocks yet. Changes no block."""
        if self.extents is not None:
            hit = self.extents.lookup(req)
            n = hit.num_blocks
            self.lookups.append(LookupRecord(
                req.rid, len(req.origin_input_ids) + len(req.output_ids), n,
                hit.num_computed_tokens, n, hit.reason))
            return hit
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
            # every hash read in C, past the first miss too (a read changes nothing): a Python
            # loop over a long prompt's hashes was a fifth of a replay between block keyframes
            found = list(map(self.pool.cached_block_hash_to_block.get, hashes[:max_blocks]))
            if None in found:
                reason, hits = "miss", found[:found.index(None)]
            else:
                reason, hits = ("cap" if len(hashes) > max_blocks else "partial"), found
            if dict in set(map(type, hits)):  # a hash on several blocks: the first cached
                hits = [e if type(e) is KVCacheBlock else next(iter(e.values())) for e in hits]
        n = len(hits)
        record = LookupRecord(req.rid, num_tokens, n, n * self.block_size, n, reason)
        self.lookups.append(record)
        if sink is not None:
            sink.emit(PrefixLookedUp(req.rid, n, n * self.block_size, n, reason))
            self.pool.end_step("get_computed_blocks")
        return ComputedBlocks(hits, n * self.block_size, n, n, reason)

    def allocate_slots(
        self, req: Req, num_new_tokens: int, new_computed: ComputedBlocks | None = None,
        prepaid: bool = False,
    ) -> list[KVCacheBlock] | int | None:
        """Slots for `num_new_tokens` more tokens after the computed ones (plus the hits in
        `new_computed`, touched here); caches every block that is full afterwards. Returns the
        newly taken blocks (an ExtentPool: how many), or None (nothing changed) when the pool is
        short. `prepaid` (ExtentPool only): the new blocks were popped by reserve_blocks.

        Arithmetic: 100 computed tokens, 30 new, block_size 16 -> ceil(130/16) = 9 blocks.
        """
        if self.extents is not None:
            return self.extents.allocate(req, num_new_tokens, new_computed, prepaid)
        if prepaid:
            raise UnsupportedByStorage("a BlockPool takes no prepaid blocks (reserve_blocks)")
        state = self.requests.get(req.rid) or self.requests.setdefault(req.rid, _ReqBlocks())
        hits = new_computed.blocks if new_computed is not None else []
        total = allocation_total(req, len(hits), len(state.blocks), state.num_computed_tokens,
                                 self.block_size, num_new_tokens)
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
            token_ids = req.all_ids
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
        if self.extents is not None:
            self.extents.release(req)
            return
        state = self.requests.pop(req.rid, None)
        if state is None:
            return
        if self.pool._sink is not None:
            self.pool.begin_step("free", req.rid)
            self.pool.free_blocks(reversed(state.blocks))
            self.pool.end_step("free")
        else:
            self.pool.free_blocks(reversed(state.blocks))

    def reserve_blocks(self, n: int) -> None:
        """Pops `n` blocks off the free queue now, for decode tokens settled later by
        allocate_slots(..., prepaid=True) (ExtentPool only: radix/sched/ledger.py's deferred
        decode steps)."""
        if self.extents is None:
            raise UnsupportedByStorage("a BlockPool takes no prepaid blocks (reserve_blocks)")
        self.extents.reserve(n)

    # --- what only named blocks can give ---------------------------------------------------
    def _blocks_only(self, what: str) -> BlockPool:
        if self.extents is not None:
            raise UnsupportedByStorage(f"{self._storage} names no blocks: no {what}")
        return self.pool

    def reset_prefix_cache(self) -> bool:
        return self._blocks_only("prefix-cache reset").reset_prefix_cache()

    def get_block_ids(self, rid: str) -> tuple[list[int], ...]:
        """The request's block table, one list per KV cache group (one group here), as vLLM's
        KVCacheManager.get_block_ids; ([],) for a request that holds no blocks.

        >>> m = BlockCacheManager(BlockPool(8, block_size=4)); r = Req("r1", list(range(10)))
        >>> _ = m.allocate_slots(r, 10, m.get_computed_blocks(r)); m.get_block_ids("r1")
        ([1, 2, 3],)
        """
        self._blocks_only("block ids")
        state = self.requests.get(rid)
        return ([b.block_id for b in state.blocks] if state is not None else [],)

    def take_events(self) -> list:
        """The KV cache events since the last call (vLLM's KVCacheManager.take_events); the
        pool must have been made with enable_kv_cache_events=True."""
        return self._blocks_only("KV events").take_events()

    def block_refs(self) -> Counter[int]:
        """block_id -> how many live requests hold it."""
        self._blocks_only("block ids")
        return Counter(b.block_id for s in self.requests.values() for b in s.blocks)

    def snapshot(self) -> BlockPoolSnapshot:
        """The pool as plain data, with each block's owning requests (radix/blocks/snapshot.py)."""
        pool = self._blocks_only("snapshots")
        owners: dict[int, list[str]] = {}
        for rid, state in self.requests.items():
            for block in state.blocks:
                owners.setdefault(block.block_id, []).append(rid)
        return take_snapshot(pool, owners, pool._step)

    # --- diagnostics, for either storage ---------------------------------------------------
    def num_unreachable_blocks(self) -> int:
        """Cached blocks that no lookup can reach: an ancestor in their chain is not cached."""
        if self.extents is not None:
            return self.extents.num_unreachable_blocks()
        return len(unreachable_block_ids(self.pool))

    def last_eviction(self, tokens: Sequence[int], ns: Hashable, block: int
                      ) -> EvictionMark | None:
        """The latest pop that evicted block `block` of `tokens`' chain in namespace `ns`
        (an ExtentPool made with record_evictions=True)."""
        if self.extents is None:
            raise UnsupportedByStorage("a BlockPool keeps no eviction marks")
        return self.extents.last_eviction(tokens, ns, block)

    def check_invariants(self) -> None:
        """The pool's invariants, with ref_cnt == references held by live requests."""
        if self.extents is not None:
            self.extents.check_invariants()
            return
        self.pool.check_invariants(self.block_refs())
        for rid, state in self.requests.items():
            for i, block in enumerate(state.blocks[:state.num_cached_blocks]):
                assert block.block_hash == state.block_hashes[i], f"{rid}: block {i} hash"


# --- the extent storage ----------------------------------------------------------------------
# A `Segment` is a run of blocks caching chain positions [lo, hi) of one trie node (a position is
# a block hash), one ref_cnt for all. vLLM's free queue holds unhashed blocks at its front (a count
# here), hashed ones behind, a request's freed blocks last first (hi-1 .. lo); hits touch each
# position's first-cached carrier (lowest `seq`); pops evict from the head.

def allocation_total(req: Req, num_hit: int, num_held: int, num_computed: int, block_size: int,
                     num_new_tokens: int) -> int:
    """Tokens the request has computed once `num_new_tokens` more are (allocate_slots' check,
    one for every storage): `num_hit` blocks found by the lookup may come only before the
    request holds any (`num_held`), and the total may not pass its tokens (ValueError).

    >>> allocation_total(Req("r", list(range(40))), 2, 0, 0, 16, 8)
    40
    """
    if num_hit and num_held:
        raise ValueError(f"request {req.rid!r}: computed blocks given after allocation")
    num_computed += num_hit * block_size
    num_tokens = len(req.origin_input_ids) + len(req.output_ids)
    if num_new_tokens < 0 or num_computed + num_new_tokens > num_tokens:
        raise ValueError(f"request {req.rid!r}: num_new_tokens {num_new_tokens} with "
                         f"{num_computed} computed exceeds its {num_tokens} tokens")
    return num_computed + num_new_tokens


class Segment:
    """Physical blocks caching positions [lo, hi) of `node`, ref_cnt `ref`, cached at `seq`."""

    __slots__ = ("node", "lo", "hi", "ref", "seq", "prev", "next", "piece")

    def __init__(self, node: TrieNode | None, lo: int, hi: int, ref: int, seq: int) -> None:
        self.node, self.lo, self.hi, self.ref, self.seq = node, lo, hi, ref, seq
        self.prev: Segment | None = None  # free-queue links (only while ref == 0)
        self.next: Segment | None = None
        self.piece: Segment | None = None  # the part split off above `hi`, if any


class EvictionMark(NamedTuple):
    pop: int  # which pop (0, 1, ...) of the pool evicted it
    now: Any  # the caller's clock when it happened (`ExtentPool.clock()`)
    num_blocks: int  # blocks that pop evicted in all


class _ReqExtents:
    """What an ExtentPool holds for one live request."""

    __slots__ = ("entries", "num_blocks", "num_cached", "num_computed_tokens", "walk")

    def __init__(self) -> None:
        self.entries: list[tuple[Segment, int]] = []  # (first piece, hi) held, by position
        self.num_blocks = 0  # blocks held (hashed + unhashed)
        self.num_cached = 0  # the first num_cached blocks carry a hash
        self.num_computed_tokens = 0  # tokens computed
        self.walk: Walk | None = None  # its last trie walk, resumed by the next one


class ExtentPool:
    """`num_blocks` blocks of `block_size` tokens (block 0 is vLLM's null block), stored as runs;
    BlockCacheManager drives it (lookup, allocate, release, reserve).

    >>> m = BlockCacheManager(ExtentPool(8, block_size=4)); r = Req("r1", list(range(10)))
    >>> _ = m.allocate_slots(r, 10, m.get_computed_blocks(r)); m.free(r)
    >>> m.pool.get_num_free_blocks(), m.pool.num_cached_blocks
    (7, 2)
    """

    def __init__(self, num_blocks: int, block_size: int = 16, enable_caching: bool = True,
                 record_evictions: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (block 0 is null), got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.enable_caching = enable_caching
        self.record_evictions = record_evictions  # keep an EvictionMark per evicted run
        self.trie = PrefixTrie(unit=block_size)
        self.requests: dict[str, _ReqExtents] = {}
        self.unhashed_free = num_blocks - 1  # free blocks without a hash: the queue's front
        self.num_queued = 0  # free blocks with a hash, behind them
        self.num_cached_blocks = 0  # blocks carrying a hash (in use or free)
        self.num_evictions = 0  # hashed blocks popped for reuse (BlockPool.num_evictions)
        self.num_pops = 0
        self.num_prepaid = 0  # blocks popped by reserve, not yet given to a request
        self.clock: Callable[[], Any] | None = None  # read into each EvictionMark (e.g. the
        #                                             simulator's step and time)
        self._seq = 0
        self._head = Segment(None, 0, 0, 0, -1)  # queue sentinels
        self._tail = Segment(None, 0, 0, 0, -1)
        self._head.next, self._tail.prev = self._tail, self._head

    def get_num_free_blocks(self) -> int:
        return self.unhashed_free + self.num_queued

    @staticmethod
    def namespace(req: Req) -> Hashable:
        """vLLM hashes the LoRA name into every block and cache_salt into the first: requests
        share blocks only when both agree (an empty string counts as none)."""
        return (req.extra_key or None, req.cache_salt or None)

    # ---------------------------------------------------------------- the manager's calls
    def lookup(self, req: Req) -> ComputedBlocks:
        """The cached prefix of a request that holds no blocks yet, capped at its
        num_tokens - 1 tokens. Changes nothing."""
        state = self.requests.setdefault(req.rid, _ReqExtents())
        if state.num_blocks:
            raise ValueError(f"request {req.rid!r} already holds blocks; look up before allocating")
        tokens = req.all_ids
        bs = self.block_size
        num_full = len(tokens) // bs
        max_blocks = (len(tokens) - 1) // bs if len(tokens) else 0
        if not self.enable_caching:
            return ComputedBlocks([], 0, 0, 0, "disabled")
        hits: list[tuple[Segment, int, int]] = []
        reached = 0
        state.walk = self.trie.walk(tokens, self.namespace(req), max_blocks)
        for node, lo, hi in state.walk.pieces:
            covered, reached = _first_carriers(node, lo, hi)
            hits += covered
            if reached < hi:
                break
        if reached < max_blocks:
            reason = "miss"
        else:
            reason = "cap" if num_full > max_blocks else "partial"
        return ComputedBlocks(hits, reached * bs, reached, reached, reason)

    def reserve(self, n: int) -> None:
        """Pops `n` blocks off the free queue now (evicting as allocation would). Pops taken
        together or one request at a time evict the same blocks: only the queue's head is read."""
        if n:
            self._pop(n)
            self.num_prepaid += n

    def allocate(self, req: Req, num_new_tokens: int, hit: ComputedBlocks | None,
                 prepaid: bool) -> int | None:
        """BlockCacheManager.allocate_slots: the number of new blocks taken, or None."""
        state = self.requests.get(req.rid) or self.requests.setdefault(req.rid, _ReqExtents())
        num_hit = hit.num_blocks if hit is not None else 0
        bs = self.block_size
        total = allocation_total(req, num_hit, state.num_blocks, state.num_computed_tokens, bs,
                                 num_new_tokens)
        num_new = max(0, -(-total // bs) - state.num_blocks - num_hit)
        if prepaid:
            if num_hit or num_new > self.num_prepaid:
                raise ValueError(f"request {req.rid!r}: {num_new} prepaid blocks wanted, "
                                 f"{self.num_prepaid} reserved")
            self.num_prepaid -= num_new
        else:
            evictable = (sum(hi - lo for seg, lo, hi in hit.blocks if seg.ref == 0)
                         if num_hit else 0)
            if num_new + evictable > self.get_num_free_blocks():
                return None
            if num_hit:
                self._touch(state, hit.blocks)
                state.num_blocks = state.num_cached = num_hit
            self._pop(num_new)
        state.num_blocks += num_new
        state.num_computed_tokens = total
        if self.enable_caching and total // bs > state.num_cached:
            self._cache(req, state, total // bs)
        return num_new

    def release(self, req: Req) -> None:
        """BlockCacheManager.free: hashed blocks that reach ref_cnt 0 go to the queue's tail
        (hi-1 .. lo), unhashed ones to the front."""
        state = self.requests.pop(req.rid, None)
        if state is None:
            return
        held: list[Segment] = []
        for seg, hi in state.entries:
            while seg is not None and seg.lo < hi:
                held.append(seg)
                seg = seg.piece
        for seg in reversed(held):
            seg.ref -= 1
            if seg.ref == 0:
                self._enqueue(seg)
        self.unhashed_free += state.num_blocks - state.num_cached

    # ---------------------------------------------------------------- mechanics
    def _touch(self, state: _ReqExtents, pieces: list[tuple[Segment, int, int]]) -> None:
        for seg, lo, hi in pieces:
            while not seg.lo <= lo < seg.hi:  # an earlier split moved lo into a later piece
                seg = seg.piece
            if seg.lo < lo:
                seg = self._split(seg, lo)
            if seg.hi > hi:
                self._split(seg, hi)
            if seg.ref == 0:
                self._unqueue(seg)
            seg.ref += 1
            state.entries.append((seg, hi))

    def _split(self, seg: Segment, at: int) -> Segment:
        """seg keeps [lo, at); returns the new piece [at, hi) (queued just before seg: the
        queue holds a segment top position first)."""
        right = Segment(seg.node, at, seg.hi, seg.ref, seg.seq)
        seg.hi = at
        right.piece, seg.piece = seg.piece, right
        seg.node.add_carrier(right)
        if seg.prev is not None:
            prev = seg.prev
            prev.next, right.prev, right.next, seg.prev = right, prev, seg, right
        return right

    def _pop(self, n: int) -> None:
        take = min(n, self.unhashed_free)
        self.unhashed_free -= take
        n -= take
        evicted = n
        while n:
            seg = self._head.next
            if seg.hi - seg.lo <= n:  # the whole segment goes
                lo = seg.lo
                self._unqueue(seg)
                seg.node.carriers.remove(seg)
            else:  # its top n positions go (the queue holds it top position first)
                lo = seg.hi - n
                self.num_queued -= n
            if self.record_evictions:
                now = self.clock() if self.clock is not None else None
                seg.node.add_mark(lo, seg.hi, EvictionMark(self.num_pops, now, evicted))
            n -= seg.hi - lo
            if lo > seg.lo:
                seg.hi = lo
        self.num_cached_blocks -= evicted
        self.num_evictions += evicted
        self.num_pops += 1

    def _cache(self, req: Req, state: _ReqExtents, num_full: int) -> None:
        tokens = req.all_ids
        first = state.num_cached
        self._seq += 1
        state.walk = self.trie.insert(tokens, self.namespace(req), num_full, state, state.walk)
        fresh = []  # the walk's pieces above `first`, found from the end
        for node, lo, hi in reversed(state.walk.pieces):
            if hi <= first:
                break
            fresh.append((node, max(lo, first), hi))
        for node, lo, hi in reversed(fresh):
            seg = Segment(node, lo, hi, 1, self._seq)
            node.add_carrier(seg)
            state.entries.append((seg, hi))
        self.num_cached_blocks += num_full - first
        state.num_cached = num_full

    def _enqueue(self, seg: Segment) -> None:
        last = self._tail.prev
        last.next, seg.prev, seg.next, self._tail.prev = seg, last, self._tail, seg
        self.num_queued += seg.hi - seg.lo

    def _unqueue(self, seg: Segment) -> None:
        seg.prev.next, seg.next.prev = seg.next, seg.prev
        seg.prev = seg.next = None
        self.num_queued -= seg.hi - seg.lo

    # ---------------------------------------------------------------- looks inside
    def num_unreachable_blocks(self) -> int:
        """Cached blocks whose chain has a gap before them (as snapshot.py defines them).

        >>> ExtentPool(4).num_unreachable_blocks()
        0
        """
        reachable = 0
        stack: list[tuple[TrieNode, bool]] = [(root, True) for root in self.trie.roots.values()]
        while stack:
            node, ok = stack.pop()
            gap = _first_gap(node) if ok else node.d0
            reachable += sum(max(0, min(s.hi, gap) - s.lo) for s in node.carriers)
            for (pos, _), child in node.children.items():
                stack.append((child, ok and pos <= gap))
        return self.num_cached_blocks - reachable

    def free_queue(self) -> list[tuple[Hashable, tuple[int, ...]] | None]:
        """The free queue head to tail, a block each: None for a block without a hash, else
        (namespace, the tokens of its chain up to and including it). For tests: O(blocks).

        >>> ExtentPool(3).free_queue()
        [None, None]
        """
        names = {id(root): ns for ns, root in self.trie.roots.items()}
        out: list[tuple[Hashable, tuple[int, ...]] | None] = [None] * self.unhashed_free
        seg = self._head.next
        bs = self.block_size
        while seg is not self._tail:
            root = seg.node
            while root.parent is not None:
                root = root.parent
            ns = names[id(root)]
            for pos in range(seg.hi - 1, seg.lo - 1, -1):
                out.append((ns, tuple(seg.node.content[:(pos + 1) * bs])))
            seg = seg.next
        return out

    def last_eviction(self, tokens: Sequence[int], ns: Hashable, block: int
                      ) -> EvictionMark | None:
        """The latest pop that evicted block `block` of `tokens`' chain (needs record_evictions)."""
        pieces, _, reached = self.trie.walk(tokens, ns, block + 1)  # (a Walk)
        if reached <= block:
            return None
        node = pieces[-1][0]
        for lo, hi, mark in reversed(node.marks):
            if lo <= block < hi:
                return mark
        return None

    def check_invariants(self) -> None:
        """Raises AssertionError unless: the queue is well linked and holds exactly the ref 0
        segments; free + in use == num_blocks - 1; cached blocks == what carriers hold; each
        segment's ref_cnt == the requests holding it."""
        queued, prev, seg = 0, self._head, self._head.next
        while seg is not self._tail:
            assert seg.prev is prev and seg.ref == 0 and seg.lo < seg.hi, "broken queue"
            queued += seg.hi - seg.lo
            prev, seg = seg, seg.next
        assert self._tail.prev is prev and queued == self.num_queued, "queue count"
        holders: Counter[int] = Counter()
        segs: dict[int, Segment] = {}
        unhashed_used = 0
        for state in self.requests.values():
            unhashed_used += state.num_blocks - state.num_cached
            for first, hi in state.entries:
                s = first
                while s is not None and s.lo < hi:
                    holders[id(s)] += 1
                    segs[id(s)] = s
                    s = s.piece
        carried = [s for node in self.trie.nodes() for s in node.carriers]
        assert sum(s.hi - s.lo for s in carried) == self.num_cached_blocks, "cached count"
        in_use = 0
        for s in carried:
            assert s.ref == holders.get(id(s), 0), f"segment [{s.lo}, {s.hi}): ref {s.ref}"
            assert (s.ref == 0) == (s.prev is not None), "a free segment is not queued"
            in_use += (s.hi - s.lo) if s.ref else 0
        assert len(segs) == sum(1 for s in carried if s.ref), "a held segment is not carried"
        assert self.get_num_free_blocks() + in_use + unhashed_used == self.num_blocks - 1, \
            "free + used"


def _first_carriers(node: TrieNode, lo: int, hi: int) -> tuple[list[tuple[Segment, int, int]], int]:
    """The first-cached carrier of each position from `lo` on, as (segment, a, b) runs, up to
    the first position no block carries (or `hi`); returns (runs, that position).

    vLLM keeps a hash's blocks in the order they were cached and hits the first: the lowest seq.
    """
    segs = sorted((s for s in node.carriers if s.lo < hi and s.hi > lo), key=lambda s: s.seq)
    out: list[tuple[Segment, int, int]] = []
    pos = lo
    while pos < hi:
        k = next((k for k, s in enumerate(segs) if s.lo <= pos < s.hi), None)
        if k is None:
            return out, pos
        best = segs[k]
        # an earlier-cached segment starting inside best's range takes over from there
        end = min([best.hi, hi] + [s.lo for s in segs[:k] if s.lo > pos])
        out.append((best, pos, end))
        pos = end
    return out, pos


def _first_gap(node: TrieNode) -> int:
    """The first position of `node` (from d0) that no carrier covers."""
    pos = node.d0
    for s in sorted(node.carriers, key=lambda s: s.lo):
        if s.lo > pos:
            break
        pos = max(pos, s.hi)
    return pos
