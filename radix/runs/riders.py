"""Block caches riding on one simulator run: unbounded runs that differ only in block size.

An unbounded run never evicts, retracts or rejects, and the block cache beside the tree
(shadow.py) only answers lookups: the scheduler's decisions (which request, when, what the
tree matched) do not depend on its block size. So the explainer's what-ifs that differ only in
`block_size` (the page-size point "page 1, blocks of 1" beside the base run "page 1, blocks of
16") share one run: the extra block caches (riders) hear the same prefills, decodes and
releases as the run's own and count their own hits. Checked after the run (no retraction, no
rejection, nothing dropped, the hit counts agree): otherwise the caller runs that
configuration on its own. Leaves out: bounded runs (a pool's evictions depend on its size).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from radix.runs.shadow import BlockShadow
from radix.runs.sim import SimConfig, SimRun, _room, build, run
from radix.traces.trace import Trace

HIT = "block_matched_tokens"
Run = tuple[SimConfig, bool]  # a what-if run: its configuration, namespaces dropped


def ride_key(cfg: SimConfig) -> SimConfig | None:
    """The configuration runs may share (block size set aside), or None when `cfg` cannot
    share: bounded, or without the block cache.

    >>> ride_key(SimConfig(block_size=16)) == ride_key(SimConfig(block_size=1))
    True
    >>> ride_key(SimConfig(capacity=1000)) is None
    True
    """
    if cfg.capacity is not None or not cfg.shadow:
        return None
    return dataclasses.replace(cfg, block_size=1)


def plan_runs(runs: list[Run]) -> list[list[int]]:
    """The simulator runs for `runs`: each a list of indices into `runs`, the first run as
    asked, the rest riding on it (same configuration but the block size, unbounded).

    >>> a, b, c = SimConfig(), SimConfig(block_size=1), SimConfig(capacity=99)
    >>> plan_runs([(a, False), (c, False), (b, False), (b, True)])
    [[0, 2], [1], [3]]
    """
    groups: dict[Any, list[int]] = {}
    for i, (cfg, strip) in enumerate(runs):
        key = ride_key(cfg)
        groups.setdefault(i if key is None else (key, strip), []).append(i)
    return list(groups.values())


def run_with_riders(trace: Trace, cfg: SimConfig, block_sizes: list[int],
                    on_arrival: Any = None
                    ) -> tuple[dict[str, Any], list[dict[str, Any] | None]]:
    """`run(build(trace, cfg), on_arrival).totals`, and for each of `block_sizes` the totals
    the same run with that block size would give (None where the check failed: run it on its
    own)."""
    sim = build(trace, cfg)
    riders = [_rider(sim, b) for b in block_sizes]
    _wire(sim.shadow, riders)
    totals = run(sim, on_arrival).totals
    ok = (not sim.sched.num_retracted and not totals["rejected"] and not sim.shadow.dropped
          and sim.shadow.hit_tokens == totals[HIT])
    return totals, [_totals(totals, r) if ok and not r.dropped else None for r in riders]


def _rider(sim: SimRun, block: int) -> BlockShadow:
    """A block cache as build() makes for an unbounded run with blocks of `block`."""
    own = sim.shadow
    return BlockShadow(_room(sim.reqs, block) + block, block, not sim.config.disable_cache,
                       compact=own.compact)


def _wire(own: BlockShadow, riders: list[BlockShadow]) -> None:
    """The riders hear `own`'s hooks after it. A decode the run reserved blocks for is new to
    a rider (it reserved nothing: unbounded, it never runs short); a rider's hit is its own
    count, never the request's metric (that is the run's block cache's)."""
    prefill, decode, release = own.on_prefill, own.on_decode, own.on_release

    def on_prefill(req: Any, extend_len: int) -> None:
        prefill(req, extend_len)
        had = HIT in req.metrics
        for r in riders:
            r.on_prefill(req, extend_len)
        if not had:
            req.metrics.pop(HIT, None)

    def on_decode(req: Any, num: int = 1, prepaid: bool = False) -> None:
        decode(req, num, prepaid)
        for r in riders:
            r.on_decode(req, num)

    def on_release(req: Any) -> None:
        release(req)
        for r in riders:
            r.on_release(req)
    own.on_prefill, own.on_decode, own.on_release = on_prefill, on_decode, on_release


def _totals(own: dict[str, Any], rider: BlockShadow) -> dict[str, Any]:
    """The run's totals with the rider's block-cache figures (sim.py `_totals`)."""
    out = dict(own)
    hit, every = rider.hit_tokens, max(own["input_tokens"] + own["rejected_input_tokens"], 1)
    out.update({HIT: hit, "block_hit_rate": hit / max(own["input_tokens"], 1),
                "block_hit_rate_all": hit / every, "block_evictions": rider.num_evictions,
                "unreachable_blocks": rider.num_unreachable_blocks(),
                "block_dropped": len(rider.dropped)})
    return out
