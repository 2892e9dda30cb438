"""vLLM's block cache shadowing the requests SGLang's scheduler admits (`BlockShadow`).

It looks up at each (re)admission, allocates each prefill chunk, one slot per decode token (or
a fast-forwarded run of them), frees at finish or retraction. A request the pool cannot hold is
dropped from the shadow and counted (vLLM would preempt it). Plain requests use the per-block
BlockCacheManager over a BlockPool (events, snapshots); compact ones over an ExtentPool, which
gives the same hits, evictions and sizes at the cost of runs (radix/blocks/manager.py).
Leaves out: vLLM's own scheduler (admission follows SGLang's: docs/FIDELITY.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from radix.blocks.hashing import BlockHasher
from radix.blocks.manager import BlockCacheManager, ExtentPool
from radix.blocks.pool import BlockPool
from radix.events import EventSink
from radix.request import Req
from radix.sched.span import most_steps, new_units


class BlockShadow:
    """The block cache beside the tree, fed by the scheduler's hooks.

    >>> s = BlockShadow(64, block_size=4, compact=True); r = Req("a", list(range(10)))
    >>> r.fill_ids = r.origin_input_ids; s.on_prefill(r, 10); s.computed, s.num_free_blocks
    ({'a': 10}, 13)
    """

    def __init__(self, capacity_tokens: int, block_size: int = 16, enable_caching: bool = True,
                 sink: EventSink | None = None, *, compact: bool = False,
                 record_evictions: bool = False,
                 hash_algo: str | BlockHasher = "radixlens") -> None:
        num_blocks = max(capacity_tokens // block_size, 1) + 1
        self.block_size = block_size
        pool = (ExtentPool(num_blocks, block_size, enable_caching, record_evictions) if compact
                else BlockPool(num_blocks, block_size, enable_caching, sink=sink,
                               hash_algo=hash_algo))
        self.manager = BlockCacheManager(pool)
        self._quiet = sink is None  # no events to emit: no-op allocations may be skipped
        self.computed: dict[str, int] = {}  # rid -> tokens the shadow holds KV for
        self.dropped: set[str] = set()  # rids the pool could not hold
        self.prefilled: dict[str, int] = {}  # rid -> tokens its prefills computed, re-prefills in
        self.hit_tokens = 0
        # hooks for the explainer: on_lookup(req, hit) at each lookup, on_compute(req) after
        # each allocation that succeeded
        self.on_lookup: Callable[[Req, Any], None] | None = None
        self.on_compute: Callable[[Req], None] | None = None

    @property
    def compact(self) -> bool:
        return self.manager.extents is not None

    @property
    def num_free_blocks(self) -> int:
        return self.manager.num_free_blocks

    @property
    def num_evictions(self) -> int:
        return self.manager.num_evictions

    def num_unreachable_blocks(self) -> int:
        return self.manager.num_unreachable_blocks()

    # ---------------------------------------------------------------- the scheduler's hooks
    def on_prefill(self, req: Req, extend_len: int) -> None:
        if req.rid in self.dropped:
            return
        if req.rid not in self.computed:
            hit = self.manager.get_computed_blocks(req)
            if self.on_lookup is not None:
                self.on_lookup(req, hit)
            req.metrics.setdefault("block_matched_tokens", hit.num_computed_tokens)
            self.hit_tokens += hit.num_computed_tokens
            new = max(len(req.fill_ids) - hit.num_computed_tokens, 0)
            self._allocate(req, new, hit, prefill=True)
        else:
            new = max(len(req.fill_ids) - self.computed[req.rid], 0)
            self._allocate(req, new, None, prefill=True)

    def on_decode(self, req: Req, num: int = 1, prepaid: bool = False) -> None:
        """`num` decode tokens (a fast-forwarded span: the tokens are in req.output_ids);
        `prepaid`: their new blocks were reserved already (BlockShadow.reserve)."""
        c = self.computed.get(req.rid)
        if c is None:
            return
        bs = self.block_size
        if c % bs and (c + num) // bs == c // bs and self._quiet:
            # inside the last held block, which does not fill: allocate_slots would take no
            # block and cache none; only the request's computed count moves
            self.computed[req.rid] = c + num
            self.manager.requests[req.rid].num_computed_tokens += num
            return
        if prepaid:
            self.manager.allocate_slots(req, num, None, prepaid=True)
            self.computed[req.rid] = c + num
            if self.on_compute is not None:
                self.on_compute(req)
            return
        self._allocate(req, num, None)

    @property
    def can_defer(self) -> bool:
        """Whether decode blocks may be reserved now and handed out later (reserve, then
        on_decode(prepaid=True)): block-extent caches without events. A compute hook then
        hears of a request's decode tokens when they are settled (a compact trace's outputs
        are ids no prompt holds); an eviction mark of a reservation counts the blocks that
        decode step took for all requests together (at the same step and time)."""
        return self.compact and self._quiet

    def reserve(self, num_blocks: int) -> None:
        """Takes `num_blocks` off the free queue for decode tokens settled later."""
        self.manager.reserve_blocks(num_blocks)

    def on_release(self, req: Req) -> None:
        if self.computed.pop(req.rid, None) is not None:
            self.manager.free(req)

    def decode_room(self, reqs: list[Req], max_steps: int) -> int:
        """The most decode steps (<= max_steps) every request here can take without the pool
        running short: one allocation a token fails at the first block it cannot get, and
        nothing is freed in between, so k steps fit iff their new blocks fit at once."""
        bs = self.block_size
        live = [self.computed[r.rid] for r in reqs if r.rid in self.computed]
        return most_steps(lambda k: sum(new_units(c, k, bs) for c in live),
                          self.num_free_blocks, max_steps)

    def _allocate(self, req: Req, num_new: int, hit: Any, prefill: bool = False) -> None:
        if self.manager.allocate_slots(req, num_new, hit) is None:
            self.manager.free(req)
            self.computed.pop(req.rid, None)
            self.dropped.add(req.rid)
            return
        start = hit.num_computed_tokens if hit is not None else self.computed[req.rid]
        self.computed[req.rid] = start + num_new
        if prefill:
            self.prefilled[req.rid] = self.prefilled.get(req.rid, 0) + num_new
        if self.on_compute is not None:
            self.on_compute(req)
