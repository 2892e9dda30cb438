"""Real requests through SGLang's component tree in the calling thread: a sliding-window model
(Gemma 3 text) on UnifiedRadixCache, driven by radix's Scheduler.

What EngineService runs for such a model (engine/backends.py's ModelBackend: the SWA pool, the
runner, the component tree), without the service's thread, block shadow and handles; the tree
frees SWA rows itself (window, checkpoint, tombstones), `counts` counts them. Leaves out:
sampling (greedy), Mamba layers (Qwen3-Next's layer is not driven here).
"""

from __future__ import annotations

from typing import Any

from engine.arch import SLIDING
from engine.backends import ModelBackend, SWACounts
from radix.events import EventSink
from radix.request import Req
from radix.sched.scheduler import Scheduler, SchedulerConfig
from radix.tree.hybrid_lifecycle import SchedulerKnobs

__all__ = ["SWACounts", "UnifiedEngine"]


class UnifiedEngine:
    """A loaded sliding-window model (Gemma 3 text), its SWA pool of `capacity_tokens` full
    rows and `swa_ratio` x as many SWA rows, the component tree over them and the scheduler.

    `knobs` are the scheduler's SGLang settings (radix/tree/hybrid_lifecycle.py); by default no
    overlap scheduler (this loop has none) and SGLang's SWA eviction interval of 128. Requests
    are scheduled first come first served (`policy`), at most `max_running` at a time.
    """

    def __init__(self, loaded: Any, capacity_tokens: int, *, swa_ratio: float = 1.0,
                 knobs: SchedulerKnobs | None = None, max_running: int = 8,
                 sink: EventSink | None = None, policy: str = "fcfs",
                 chunked_prefill_size: int | None = None) -> None:
        config = loaded.model.config
        if SLIDING not in (getattr(config, "layer_types", None) or ()):
            raise ValueError(f"{loaded.name}: no sliding-window layers (the component tree's "
                             "SWA part needs them; run it on EngineService)")
        backend = ModelBackend(loaded, capacity_tokens, swa_ratio=swa_ratio)
        self.allocator, self.pool, self.runner = backend.allocator, backend.pool, backend.runner
        self.cache = backend.tree_class(page_size=1, sink=sink, disable=False,
                                        allocator=self.pool)
        self.counts: SWACounts = backend.swa_counts
        self.knobs = knobs or backend.knobs
        self.scheduler = Scheduler(
            self.runner, self.cache, self.pool,
            SchedulerConfig(policy=policy, max_running_requests=max_running,
                            chunked_prefill_size=chunked_prefill_size),
            clock=backend.clock, knobs=self.knobs)

    def run(self, reqs: list[Req]) -> list[Req]:
        """Runs `reqs` to the end and returns them in the order they finished;
        `req.metrics["matched_tokens"]` is each one's hit. ValueError when a request does not
        fit the pools even alone."""
        sched = self.scheduler
        done = len(sched.finished)
        for req in reqs:
            sched.add_request(req)
        sched.run_to_completion()
        return sched.finished[done:]
