"""vLLM's block cache at the cost of extents, not blocks: BlockCacheManager's hits, evictions,
free-queue order and sizes (tests/radix/blocks/test_extents.py holds them equal) for millions of
tokens.

A `Segment` is a run of blocks caching chain positions [lo, hi) of one trie node (trie.py: a
position is a block hash), one ref_cnt for all. vLLM's free queue holds unhashed blocks at its
front (a count here), hashed ones behind, a request's freed blocks last first (hi-1 .. lo); hits
touch each position's first-cached carrier (lowest `seq`); pops evict from the head. The
functions at the end look into a manager: unreachable blocks (a cached block whose chain has a
gap before it, as radix/blocks/snapshot.py defines them), the free queue one block at a time
(named by what each block caches, to hold against BlockPool's), the last eviction, invariants.
Leaves out: block ids (blocks are counted, not named), KV events, snapshots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from radix.blocks.trie import PrefixTrie, TrieNode, Walk
from radix.request import Req


class Segment:
    """Physical blocks caching positions [lo, hi) of `node`, ref_cnt `ref`, cached at `seq`."""

    __slots__ = ("node", "lo", "hi", "ref", "seq", "prev", "next", "piece")

    def __init__(self, node: TrieNode | None, lo: int, hi: int, ref: int, seq: int) -> None:
        self.node, self.lo, self.hi, self.ref, self.seq = node, lo, hi, ref, seq
        self.prev: Segment | None = None  # free-queue links (only while ref == 0)
        self.next: Segment | None = None
        self.piece: Segment | None = None  # the part split off above `hi`, if any


class ExtentHit(NamedTuple):
    pieces: list[tuple[Segment, int, int]]  # (carrier, lo, hi): the first-cached blocks hit
    num_blocks: int  # blocks matched from the start
    num_computed_tokens: int  # num_blocks * block_size
    stop_block: int  # the first block not matched
    reason: str  # "miss" | "cap" | "partial" | "disabled", as LookupRecord.reason


class EvictionMark(NamedTuple):
    pop: int  # which pop (0, 1, ...) of the pool evicted it
    now: Any  # the caller's clock when it happened (`ExtentBlockManager.clock()`)
    num_blocks: int  # blocks that pop evicted in all


class _ReqState:
    __slots__ = ("entries", "num_blocks", "num_cached", "num_computed_tokens", "walk")

    def __init__(self) -> None:
        self.entries: list[tuple[Segment, int]] = []  # (first piece, hi) held, by position
        self.num_blocks = 0  # blocks held (hashed + unhashed)
        self.num_cached = 0  # the first num_cached blocks carry a hash
        self.num_computed_tokens = 0  # tokens computed
        self.walk: Walk | None = None  # its last trie walk, resumed by the next one


class ExtentBlockManager:
    """BlockCacheManager's calls (get_computed_blocks, allocate_slots, free) over extents.

    >>> m = ExtentBlockManager(8, block_size=4); r = Req("r1", list(range(10)))
    >>> hit = m.get_computed_blocks(r); m.allocate_slots(r, 10, hit)
    3
    >>> m.free(r); m.get_computed_blocks(Req("r2", list(range(9)))).num_computed_tokens
    8
    >>> m.num_free_blocks, m.num_cached_blocks  # block 0 is vLLM's null block
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
        self.requests: dict[str, _ReqState] = {}
        self.unhashed_free = num_blocks - 1  # free blocks without a hash: the queue's front
        self.num_queued = 0  # free blocks with a hash, behind them
        self.num_cached_blocks = 0  # blocks carrying a hash (in use or free)
        self.num_evictions = 0  # hashed blocks popped for reuse (BlockPool.num_evictions)
        self.num_pops = 0
        self.num_prepaid = 0  # blocks popped by reserve_blocks, not yet given to a request
        self.clock: Callable[[], Any] | None = None  # read into each EvictionMark (e.g. the
        #                                             simulator's step and time)
        self._seq = 0
        self._head = Segment(None, 0, 0, 0, -1)  # queue sentinels
        self._tail = Segment(None, 0, 0, 0, -1)
        self._head.next, self._tail.prev = self._tail, self._head

    @property
    def num_free_blocks(self) -> int:
        return self.unhashed_free + self.num_queued

    @staticmethod
    def namespace(req: Req) -> Hashable:
        """vLLM hashes the LoRA name into every block and cache_salt into the first: requests
        share blocks only when both agree (an empty string counts as none)."""
        return (req.extra_key or None, req.cache_salt or None)

    # ---------------------------------------------------------------- the three calls
    def get_computed_blocks(self, req: Req) -> ExtentHit:
        """The cached prefix of a request that holds no blocks yet, capped at its
        num_tokens - 1 tokens. Changes nothing."""
        state = self.requests.setdefault(req.rid, _ReqState())
        if state.num_blocks:
            raise ValueError(f"request {req.rid!r} already holds blocks; look up before allocating")
        tokens = req.origin_input_ids + req.output_ids
        bs = self.block_size
        num_full = len(tokens) // bs
        max_blocks = (len(tokens) - 1) // bs if len(tokens) else 0
        if not self.enable_caching:
            return ExtentHit([], 0, 0, 0, "disabled")
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
        return ExtentHit(hits, reached, reached * bs, reached, reason)

    def reserve_blocks(self, n: int) -> None:
        """Pops `n` blocks off the free queue now (evicting as allocation would), for decode
        tokens settled later by allocate_slots(..., prepaid=True): the scheduler's deferred
        decode steps (radix/sched/ledger.py). Pops taken together or one request at a time
        evict the same blocks: only the queue's head is read."""
        if n:
            self._pop(n)
            self.num_prepaid += n

    def allocate_slots(self, req: Req, num_new_tokens: int, hit: ExtentHit | None = None,
                       prepaid: bool = False) -> int | None:
        """Blocks for `num_new_tokens` more tokens after the computed ones (plus `hit`, touched
        here); caches every block full afterwards. Returns the number of new blocks taken, or
        None (nothing changed) when the pool is short. `prepaid`: the new blocks were popped
        already (reserve_blocks)."""
        state = self.requests.get(req.rid) or self.requests.setdefault(req.rid, _ReqState())
        num_hit = hit.num_blocks if hit is not None else 0
        if num_hit and state.num_blocks:
            raise ValueError(f"request {req.rid!r}: computed blocks given after allocation")
        bs = self.block_size
        num_computed_tokens = state.num_computed_tokens + num_hit * bs
        num_tokens = len(req.origin_input_ids) + len(req.output_ids)
        if num_new_tokens < 0 or num_computed_tokens + num_new_tokens > num_tokens:
            raise ValueError(f"request {req.rid!r}: num_new_tokens {num_new_tokens} with "
                             f"{num_computed_tokens} computed exceeds its {num_tokens} tokens")
        total = num_computed_tokens + num_new_tokens
        num_new = max(0, -(-total // bs) - state.num_blocks - num_hit)
        if prepaid:
            if num_hit or num_new > self.num_prepaid:
                raise ValueError(f"request {req.rid!r}: {num_new} prepaid blocks wanted, "
                                 f"{self.num_prepaid} reserved")
            self.num_prepaid -= num_new
        else:
            evictable = (sum(hi - lo for seg, lo, hi in hit.pieces if seg.ref == 0)
                         if num_hit else 0)
            if num_new + evictable > self.num_free_blocks:
                return None
            if num_hit:
                self._touch(state, hit.pieces)
                state.num_blocks = state.num_cached = num_hit
            self._pop(num_new)
        state.num_blocks += num_new
        state.num_computed_tokens = total
        if self.enable_caching and total // bs > state.num_cached:
            self._cache(req, state, total // bs)
        return num_new

    def free(self, req: Req) -> None:
        """Releases the request's blocks last block first: its hashed blocks that reach
        ref_cnt 0 go to the queue's tail (hi-1 .. lo), its unhashed ones to the front."""
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
    def _touch(self, state: _ReqState, pieces: list[tuple[Segment, int, int]]) -> None:
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
        seg.node.carriers.append(right)
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
                seg.node.marks.append((lo, seg.hi, EvictionMark(self.num_pops, now, evicted)))
            n -= seg.hi - lo
            if lo > seg.lo:
                seg.hi = lo
        self.num_cached_blocks -= evicted
        self.num_evictions += evicted
        self.num_pops += 1

    def _cache(self, req: Req, state: _ReqState, num_full: int) -> None:
        tokens = req.origin_input_ids + req.output_ids
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
            node.carriers.append(seg)
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


def num_unreachable_blocks(m: ExtentBlockManager) -> int:
    """Cached blocks that no lookup can reach (BlockCacheManager.num_unreachable_blocks).

    >>> num_unreachable_blocks(ExtentBlockManager(4))
    0
    """
    reachable = 0
    stack: list[tuple[TrieNode, bool]] = [(root, True) for root in m.trie.roots.values()]
    while stack:
        node, ok = stack.pop()
        gap = _first_gap(node) if ok else node.d0
        reachable += sum(max(0, min(s.hi, gap) - s.lo) for s in node.carriers)
        for (pos, _), child in node.children.items():
            stack.append((child, ok and pos <= gap))
    return m.num_cached_blocks - reachable


def _first_gap(node: TrieNode) -> int:
    """The first position of `node` (from d0) that no carrier covers."""
    pos = node.d0
    for s in sorted(node.carriers, key=lambda s: s.lo):
        if s.lo > pos:
            break
        pos = max(pos, s.hi)
    return pos


def free_queue(m: ExtentBlockManager) -> list[tuple[Hashable, tuple[int, ...]] | None]:
    """The free queue head to tail, a block each: None for a block without a hash, else
    (namespace, the tokens of its chain up to and including it). For tests: cost O(blocks).

    >>> free_queue(ExtentBlockManager(3))
    [None, None]
    """
    names = {id(root): ns for ns, root in m.trie.roots.items()}
    out: list[tuple[Hashable, tuple[int, ...]] | None] = [None] * m.unhashed_free
    seg = m._head.next
    bs = m.block_size
    while seg is not m._tail:
        root = seg.node
        while root.parent is not None:
            root = root.parent
        ns = names[id(root)]
        for pos in range(seg.hi - 1, seg.lo - 1, -1):
            out.append((ns, tuple(seg.node.content[:(pos + 1) * bs])))
        seg = seg.next
    return out


def last_eviction(m: ExtentBlockManager, tokens: Sequence[int], ns: Hashable, block: int
                  ) -> EvictionMark | None:
    """The latest pop that evicted block `block` of `tokens`' chain (needs record_evictions)."""
    pieces, _, reached = m.trie.walk(tokens, ns, block + 1)  # (a Walk)
    if reached <= block:
        return None
    node = pieces[-1][0]
    for lo, hi, mark in reversed(node.marks):
        if lo <= block < hi:
            return mark
    return None


def check_invariants(m: ExtentBlockManager) -> None:
    """Raises AssertionError unless: the queue is well linked and holds exactly the ref 0
    segments; free + in use == num_blocks - 1; cached blocks == what carriers hold; each
    segment's ref_cnt == the requests holding it."""
    queued, prev, seg = 0, m._head, m._head.next
    while seg is not m._tail:
        assert seg.prev is prev and seg.ref == 0 and seg.lo < seg.hi, "broken queue"
        queued += seg.hi - seg.lo
        prev, seg = seg, seg.next
    assert m._tail.prev is prev and queued == m.num_queued, "queue count"
    holders: Counter[int] = Counter()
    segs: dict[int, Segment] = {}
    unhashed_used = 0
    for state in m.requests.values():
        unhashed_used += state.num_blocks - state.num_cached
        for first, hi in state.entries:
            s = first
            while s is not None and s.lo < hi:
                holders[id(s)] += 1
                segs[id(s)] = s
                s = s.piece
    carried = [s for node in m.trie.nodes() for s in node.carriers]
    assert sum(s.hi - s.lo for s in carried) == m.num_cached_blocks, "cached count"
    in_use = 0
    for s in carried:
        assert s.ref == holders.get(id(s), 0), f"segment [{s.lo}, {s.hi}): ref {s.ref}"
        assert (s.ref == 0) == (s.prev is not None), "a free segment is not queued"
        in_use += (s.hi - s.lo) if s.ref else 0
    assert len(segs) == sum(1 for s in carried if s.ref), "a held segment is not carried"
    assert m.num_free_blocks + in_use + unhashed_used == m.num_blocks - 1, "free + used"
