"""The sliding window passing a running request: its SWA rows freed, and what the tree may keep.

Follows SGLang 0.5.23's `free_swa_out_of_window_slots` (mem_cache/common.py) as
`ScheduleBatch.maybe_evict_swa` calls it before each decode step, at page 1 without Mamba: a
request frees the SWA rows of its own positions (never the tree-owned prefix below
`cache_protected_len`) that no later query can see, once SGLANG_SWA_EVICTION_INTERVAL more have
left the window. The tree here is radix's FULL-only RadixCache: it cannot hold a token without its
SWA row (SGLang's component tree tombstones it), so `WindowedRadixCache` inserts a finished
request only up to the first position the window freed and frees the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radix.request import Req
from radix.sched.scheduler import StepOutput
from radix.tree.radix_cache import RadixCache

SWA_EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL's default


@dataclass
class WindowCursor:
    """One request's window state (SGLang's ReqKvInfo swa fields), kept on the request."""

    evicted: int = 0  # SWA rows of positions below this are freed (swa_evicted_seqlen)
    dead_lo: int | None = None  # the first position whose SWA row the window freed


def cursor(req: Req) -> WindowCursor:
    """The request's cursor, made on first use (a new row starts with none)."""
    cur = getattr(req, "swa_cursor", None)
    if cur is None:
        cur = req.swa_cursor = WindowCursor()
    return cur


def free_out_of_window(pool: Any, req: Req, pre_len: int, sliding_window_size: int,
                       interval: int = SWA_EVICTION_INTERVAL) -> int:
    """Before the step that computes position `pre_len`: frees the SWA rows of positions
    max(cursor, cache_protected_len) .. pre_len - sliding_window_size - 1 when at least
    `interval` have left the window since the last free; returns the rows freed.

    SGLang's sliding_window_size is the HF config's sliding_window - 1 (Gemma 3's
    get_attention_sliding_window_size): the query at pre_len sees positions
    pre_len - sliding_window_size .. pre_len. Window 7, interval 1, a 20-token prompt cached
    by the tree (protected 20), computing position 30: frees 20..22 (3 rows), keeps 23..30;
    at 31 one more (23). With interval 4 the next free waits until 4 more have left (at 34):
    >>> from engine.swa_slots import SWASlots
    >>> pool = SWASlots(80, 80); req = Req("r", list(range(20)), slot_ids=pool.alloc(31))
    >>> req.cache_protected_len = 20
    >>> free_out_of_window(pool, req, 30, 7, 1), free_out_of_window(pool, req, 31, 7, 1)
    (3, 1)
    >>> pool.translate(req.slot_ids[19:25]), cursor(req)
    ([20, 0, 0, 0, 0, 25], WindowCursor(evicted=24, dead_lo=20))
    >>> req = Req("s", list(range(20)), slot_ids=pool.alloc(35)); req.cache_protected_len = 20
    >>> [free_out_of_window(pool, req, p, 7, 4) for p in range(30, 35)]
    [3, 0, 0, 0, 4]
    """
    cur = cursor(req)
    if pre_len - sliding_window_size < cur.evicted + interval:
        return 0
    lo = max(cur.evicted, req.cache_protected_len)
    hi = max(lo, pre_len - sliding_window_size)
    if hi > lo:
        pool.free_swa(req.slot_ids[lo:hi])
        if cur.dead_lo is None:
            cur.dead_lo = lo
    cur.evicted = hi
    return hi - lo


class SlidingWindowRunner:
    """A runner whose decode steps first free each request's SWA rows past the window (the
    Runner protocol: `extend`, `decode`); an extend starts a new row, so a new cursor."""

    def __init__(self, runner: Any, pool: Any, sliding_window_size: int,
                 interval: int = SWA_EVICTION_INTERVAL) -> None:
        if sliding_window_size < 1 or interval < 1:
            raise ValueError(f"sliding_window_size and interval must be >= 1, got "
                             f"{sliding_window_size} and {interval}")
        self.runner, self.pool = runner, pool
        self.sliding_window_size, self.interval = sliding_window_size, interval
        self.num_freed = 0  # SWA rows freed as the window passed, all requests

    @property
    def last_logits(self) -> Any:
        return self.runner.last_logits

    def extend(self, reqs: list[Req], prefix_lens: list[int]) -> StepOutput:
        for req in reqs:  # a prompt, a chunk or a re-prefill: nothing of its row freed yet
            req.swa_cursor = WindowCursor()
        return self.runner.extend(reqs, prefix_lens)

    def decode(self, reqs: list[Req]) -> StepOutput:
        for req in reqs:
            self.num_freed += free_out_of_window(self.pool, req, len(req.all_ids) - 1,
                                                 self.sliding_window_size, self.interval)
        return self.runner.decode(reqs)


class WindowedRadixCache(RadixCache):
    """radix's RadixCache for a pool whose SWA rows a request's window frees: a finished
    request is inserted only below the first freed position (`dead_lo`), the rest of its row
    freed, so every cached token keeps its SWA row. SGLang's component tree instead keeps the
    FULL slots and tombstones the SWA part (radix/tree's UnifiedRadixCache)."""

    def cache_finished_req(self, req: Req, is_insert: bool = True,
                           kv_len_to_handle: int | None = None) -> None:
        cur = getattr(req, "swa_cursor", None)
        if cur is not None and cur.dead_lo is not None:
            owned = len(req.slot_ids) if kv_len_to_handle is None else kv_len_to_handle
            kv_len_to_handle = min(owned, cur.dead_lo)
        super().cache_finished_req(req, is_insert, kv_len_to_handle)
