"""Real requests through SGLang's component tree: a sliding-window model on UnifiedRadixCache.

The tree is radix/tree's UnifiedRadixCache with FULL and SWA components over the allocator of the
SWA pool (radix/tree/hybrid_pools.py's SWASlotAllocator; the rows behind its ids are
engine/swa_pool.py's). A request goes the way radix/tree/hybrid_lifecycle.py drives one in SGLang
0.5.23 (match_kv_cache, admit, extend, prefill_done, decode_step, finish), every step a real
forward of engine/runner.py, prefills and decode steps batched. The tree frees SWA rows itself:
out of a running request's window, at its checkpoint and as it decodes; tombstoned under pressure.
Leaves out: retraction (admission reserves every request's tokens), chunked prefill, sampling
(greedy), Mamba layers (transformers' Qwen3-Next runs on CPU, but its layer is not driven here).
"""

from __future__ import annotations

from typing import Any

from engine.arch import SLIDING
from engine.runner import ModelRunner
from engine.swa_pool import SWAKVPool
from radix.events import ComponentTombstoned, Event, EventSink, SlidingWindowFreed
from radix.request import Req
from radix.tree.components.base import FULL, SWA
from radix.tree.hybrid_lifecycle import (
    SchedulerKnobs,
    admit,
    decode_step,
    extend,
    finish,
    match_kv_cache,
    prefill_done,
)
from radix.tree.hybrid_pools import SWASlotAllocator
from radix.tree.unified_radix_cache import UnifiedRadixCache

PENDING = -1  # decode_step's token while the batch's forward has not run yet


class SWACounts:
    """An event sink that counts the SWA rows freed, by cause, and passes every event on."""

    def __init__(self, inner: EventSink | None = None) -> None:
        self.inner = inner
        self.window_freed = 0  # rows freed as the window passed a running request
        self.tombstoned = 0  # rows freed with a node's SWA value (eviction, cascade)

    def emit(self, event: Event) -> None:
        if isinstance(event, SlidingWindowFreed):
            self.window_freed += event.end - event.start
        elif isinstance(event, ComponentTombstoned) and event.component == "swa":
            self.tombstoned += event.num_slots
        if self.inner is not None:
            self.inner.emit(event)


class UnifiedEngine:
    """A loaded sliding-window model (Gemma 3 text), its SWA pool of `capacity_tokens` full
    rows and `swa_ratio` x as many SWA rows, and the component tree over them.

    `knobs` are the scheduler's SGLang settings (radix/tree/hybrid_lifecycle.py); by default no
    overlap scheduler (this loop has none) and SGLang's SWA eviction interval of 128.
    """

    def __init__(self, loaded: Any, capacity_tokens: int, *, swa_ratio: float = 1.0,
                 knobs: SchedulerKnobs | None = None, max_running: int = 8,
                 sink: EventSink | None = None) -> None:
        config = loaded.model.config
        if SLIDING not in (getattr(config, "layer_types", None) or ()):
            raise ValueError(f"{loaded.name}: no sliding-window layers (the component tree's "
                             "SWA part needs them; run it on EngineService)")
        self.allocator = SWASlotAllocator(capacity_tokens, max(1, int(capacity_tokens * swa_ratio)))
        self.pool = SWAKVPool.for_model(config, capacity_tokens, loaded.dtype, loaded.device,
                                        swa_ratio, allocator=self.allocator)
        self.counts = SWACounts(sink)
        # SGLang's sliding_window_size: the HF window less the query's own position
        self.cache = UnifiedRadixCache((FULL, SWA), sliding_window_size=config.sliding_window - 1,
                                       allocator=self.allocator, sink=self.counts)
        self.runner = ModelRunner(loaded.model, self.pool)
        self.knobs = knobs or SchedulerKnobs(enable_overlap_schedule=False)
        self.max_running = max_running

    def run(self, reqs: list[Req]) -> list[Req]:
        """Runs `reqs` to the end, first come first served, at most `max_running` at a time:
        a prefill of those admitted whenever one waits and fits, else a decode step. Returns
        them in the order they finished; `req.metrics["matched_tokens"]` is each one's hit.
        ValueError when a request does not fit even alone."""
        waiting, running, done = list(reqs), [], []
        while waiting or running:
            admitted = self._admit(waiting, running)
            if admitted:
                running += self._prefill(admitted, done)
            elif running:
                running = self._decode(running, done)
            else:
                raise ValueError(f"request {waiting[0].rid!r} does not fit the pools even alone "
                                 f"({self.allocator.full.size:,} full, "
                                 f"{self.allocator.swa.size:,} SWA rows)")
        return done

    def _admit(self, waiting: list[Req], running: list[Req]) -> list[Req]:
        """Matches waiting requests in order and admits (locks) each that fits beside the
        running and admitted ones (SGLang's PrefillAdder: free + evictable tokens, its own hit
        locked, less what the others will take, the SWA side by its peak estimate), stopping
        at the first that does not."""
        admitted: list[Req] = []
        while waiting and len(running) + len(admitted) < self.max_running:
            req = waiting[0]
            match_kv_cache(self.cache, req)
            receipt = self.cache.inc_lock_ref(req.last_node)  # its hit is not evictable room
            full, swa = self._room(running + admitted)
            self.cache.dec_lock_ref(req.last_node, receipt)
            extend_len, new = len(req.all_ids) - req.cache_protected_len, req.max_new_tokens
            if extend_len + new > full or self._swa_tokens(extend_len, new) > swa:
                break
            req.metrics["matched_tokens"] = req.cache_protected_len
            admit(self.cache, req, self.knobs)
            admitted.append(waiting.pop(0))
        return admitted

    def _room(self, holders: list[Req]) -> tuple[int, int]:
        """(full, SWA) tokens the pools can still give: free plus evictable, less what each
        holder will still take (its row's growth; its SWA peak)."""
        a, c = self.allocator, self.cache
        full = a.full_available_size() + c.component_evictable_size(FULL)
        swa = a.swa_available_size() + c.component_evictable_size(SWA)
        for r in holders:
            extend_len, new = len(r.all_ids) - len(r.slot_ids), r.max_new_tokens - len(r.output_ids)
            full -= extend_len + new
            swa -= self._swa_tokens(extend_len, new)
        return full, swa

    def _swa_tokens(self, extend_len: int, new_tokens: int) -> int:
        """SGLang's estimate_swa_kv_tokens at page 1: the prefill past one window, then at most
        a window (and a page) held while decoding. Window 7, 32 new prompt tokens, 16 to decode:
        25 + 7 + 1 = 33."""
        w = self.cache.sliding_window_size
        return max(extend_len - w, 0) + min(extend_len + new_tokens, w) + 1

    def _prefill(self, batch: list[Req], done: list[Req]) -> list[Req]:
        prefix_lens = [len(req.slot_ids) for req in batch]
        for req in batch:
            extend(self.cache, req, len(req.all_ids))
        out = self.runner.extend(batch, prefix_lens)
        running = []
        for req, token in zip(batch, out.next_token_ids):
            (done if prefill_done(self.cache, req, token) else running).append(req)
        return running

    def _decode(self, running: list[Req], done: list[Req]) -> list[Req]:
        """One batched decode step. decode_step frees each request's SWA past its window and
        gives it a slot, appending its token as it goes; the forward needs every slot first,
        so it runs after, on each request's previous token, and its tokens replace PENDING."""
        decode_step(self.cache, running, self.knobs, lambda req: PENDING)
        for req in running:
            req.output_ids.pop()
        out = self.runner.decode(running)
        still = []
        for req, token in zip(running, out.next_token_ids):
            req.output_ids.append(token)
            if req.finished:
                finish(self.cache, req)
                done.append(req)
            else:
                still.append(req)
        return still
