"""What EngineService runs: the real model or the simulated one, behind one runner protocol.

A backend is a runner (radix/sched/scheduler.py's `Runner`: `extend`, `decode`), the pool its
slots come from, the clock the scheduler reads, and the few facts `submit` checks a request
against. `ModelBackend` is the model on its paged KV pool (engine/runner.py, wall clock), on
the loop's thread (engine/procservice.py runs the whole service in a process of its own); a
sliding-window model's pool keeps its SWA rows apart and its tree is SGLang's component tree;
`SimBackend` is radix's SimRunner (priced for Llama-3-8B on an H100, derived, not measured) on
a SlotAllocator and a simulated clock: no model is loaded and nothing is computed, every reply
is REPLY's tokens, and `step_s` paces the loop so a classroom sees it change at a visible rate.
Leaves out: sampling and EOS for the simulated runner (its replies are fixed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from engine.arch import SLIDING
from engine.kv_pool import KVPool
from engine.model import LoadedModel
from engine.runner import ModelRunner
from engine.swa_pool import SWAKVPool
from radix.events import ComponentTombstoned, Event, EventSink, SlidingWindowFreed
from radix.request import Allocator, Req, SlotAllocator
from radix.runs.costs import CostModel
from radix.runs.sim import SimClock, SimRunner
from radix.sched.scheduler import Runner
from radix.tree.components.base import FULL, SWA
from radix.tree.hybrid_lifecycle import SchedulerKnobs
from radix.tree.hybrid_pools import SWASlotAllocator
from radix.tree.radix_cache import RadixCache
from radix.tree.unified_radix_cache import UnifiedRadixCache

REPLY = "(sim) ok"  # every simulated answer's text (repeated or cut to max_new_tokens)
SWA_EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL's default


class Backend(Protocol):
    """The runner, its pool and clock, and what a request is checked against."""

    runner: Runner
    pool: Allocator  # with .size, the slots in all
    clock: Callable[[], float]
    vocab_size: int | None  # token ids must be below it (None: any id >= 0)
    max_context: int | None  # prompt + new tokens may not pass it (None: no limit)
    eos_ids: frozenset[int]
    step_s: float  # seconds the loop waits after each step (0: none)
    # optional: `tree_class`, the tree EngineService builds over `pool` (RadixCache when absent),
    # called as tree_class(page_size=, sink=, disable=, allocator=pool); `knobs`, the
    # scheduler's SchedulerKnobs for a component tree

    def accepted(self, req: Req) -> None:
        """`req` got its rid and is about to be queued."""

    def finished(self, rid: str) -> None:
        """The request `rid` is answered (finished, failed or cancelled)."""

    def close(self) -> None:
        """The loop has ended: release what the backend holds."""


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


class ModelBackend:
    """The loaded model on a KV pool of `capacity_tokens` slots (one a token). A model with
    sliding-window layers (Gemma 3) at page 1 gets an SWA pool of `swa_ratio` x the slots
    (engine/swa_pool.py) and SGLang's component tree (`tree_class`: UnifiedRadixCache with FULL
    and SWA over the pool's allocator), which frees the rows the window has passed (every
    `swa_eviction_interval` tokens) and tombstones SWA under pressure, counted in
    `swa_counts`; at page > 1 its sliding layers read the one pool, masked to the window, under
    the FULL-only RadixCache, and nothing is freed early."""

    step_s = 0.0

    def __init__(self, loaded: LoadedModel, capacity_tokens: int, page_size: int = 1, *,
                 swa_ratio: float = 1.0,
                 swa_eviction_interval: int = SWA_EVICTION_INTERVAL) -> None:
        config = loaded.model.config
        self.tree_class: Any = RadixCache
        self.knobs: SchedulerKnobs | None = None
        self.swa_counts: SWACounts | None = None
        if SLIDING in (getattr(config, "layer_types", None) or ()) and page_size == 1:
            self.allocator = SWASlotAllocator(capacity_tokens,
                                              max(1, int(capacity_tokens * swa_ratio)))
            self.pool = SWAKVPool.for_model(config, capacity_tokens, loaded.dtype, loaded.device,
                                            swa_ratio, allocator=self.allocator)
            # this loop has no overlap scheduler (SGLang's SWA still waits one decode step)
            self.knobs = SchedulerKnobs(enable_overlap_schedule=False,
                                        swa_eviction_interval=swa_eviction_interval)
            # SGLang's sliding_window_size: the HF window less the query's own position
            self.sliding_window_size = config.sliding_window - 1
            self.tree_class = self._component_tree
        else:
            self.pool = KVPool.for_model(config, capacity_tokens, loaded.dtype, loaded.device)
        self.runner = ModelRunner(loaded.model, self.pool)
        self.clock = time.monotonic
        self.vocab_size = loaded.model.config.vocab_size
        self.max_context = loaded.max_context
        self.eos_ids = loaded.eos_token_ids

    def _component_tree(self, *, page_size: int, sink: EventSink | None, disable: bool,
                        allocator: Any) -> UnifiedRadixCache:
        """SGLang's UnifiedRadixCache (FULL + SWA) over the SWA pool's allocator."""
        self.swa_counts = SWACounts(sink)
        return UnifiedRadixCache((FULL, SWA), page_size=page_size,
                                 sliding_window_size=self.sliding_window_size,
                                 allocator=self.allocator, sink=self.swa_counts, disable=disable)

    def accepted(self, req: Req) -> None:
        pass

    def finished(self, rid: str) -> None:
        pass

    def close(self) -> None:
        pass


class SimBackend:
    """The simulated runner; `loaded` only needs a `tokenizer` (its `encode` makes REPLY's
    tokens, its `decode` each result's text)."""

    vocab_size = None
    max_context = None
    eos_ids: frozenset[int] = frozenset()

    def __init__(self, loaded: Any, capacity_tokens: int, page_size: int = 1,
                 step_s: float = 0.0) -> None:
        self.step_s = step_s
        encode = getattr(loaded.tokenizer, "encode", None)
        self._reply = list(encode(REPLY)) if encode else [0]  # what every request "generates"
        self.clock = SimClock()
        self.pool = SlotAllocator(capacity_tokens, page_size=page_size)
        self.replies: dict[str, list[int]] = {}  # rid -> the tokens it will "generate"
        self.runner = SimRunner(CostModel(), self.clock)
        self.runner.outputs = self.replies  # subtle: SimRunner swaps an empty mapping for its own

    def accepted(self, req: Req) -> None:
        # a request never holds more tokens than the pool: a hostile max_tokens of 10**18 must
        # not become a list of that length here
        n = min(req.max_new_tokens, self.pool.size)
        self.replies[req.rid] = (self._reply * (n // len(self._reply) + 1))[:n]

    def finished(self, rid: str) -> None:
        self.replies.pop(rid, None)

    def close(self) -> None:
        pass


def simulated(step_s: float = 0.0) -> Callable[..., SimBackend]:
    """EngineService's `backend=` for the simulated runner paced at `step_s` a step."""
    def make(loaded: Any, capacity_tokens: int, page_size: int = 1) -> SimBackend:
        return SimBackend(loaded, capacity_tokens, page_size, step_s)
    return make
