"""`cache-aware`: SGLang's model gateway (sgl-router) `cache_aware` policy.

Follows sgl-router's `policies/cache_aware.rs` and its documented parameters (RouterArgs in
`sglang_router/router_args.py`, model gateway): per request, first the imbalance test on the
workers' loads (requests in flight): imbalanced when `max - min > balance_abs_threshold` AND
`max > min * balance_rel_threshold`; then the request goes to the least loaded worker (the
shortest queue) and is still inserted into that worker's approximate tree. Balanced: the match
ratio (matched / prompt length) against the approximate trees; above `cache_threshold` the
worker with the longest match, else the worker whose tree is smallest (most room). Every
`eviction_interval_secs` the trees are trimmed to `max_tree_size` by LRU leaves.
Deliberate differences: trees of token blocks, sizes in tokens (upstream: characters); ties go
to the lowest id (upstream: whichever its map yields); eviction runs on the simulated clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from radix.cluster.approx import ApproxTree
from radix.cluster.base import Decision, Load, RouteRequest


@dataclass(frozen=True)
class CacheAwareConfig:
    cache_threshold: float = 0.3  # RouterArgs.cache_threshold (model gateway default)
    balance_abs_threshold: int = 64  # RouterArgs.balance_abs_threshold, requests
    balance_rel_threshold: float = 1.5  # RouterArgs.balance_rel_threshold
    eviction_interval_secs: float = 120.0  # RouterArgs.eviction_interval_secs (0: never)
    max_tree_size: int = 2**26  # RouterArgs.max_tree_size (upstream characters; here tokens)
    block_size: int = 16  # tokens per block key of the routed prompts

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1.0:
            raise ValueError("balance_abs_threshold must be >= 0, balance_rel_threshold >= 1")
        if self.max_tree_size < 1 or self.block_size < 1 or self.eviction_interval_secs < 0:
            raise ValueError("max_tree_size and block_size must be >= 1, interval >= 0")


def is_imbalanced(loads: Sequence[int], abs_threshold: float, rel_threshold: float) -> bool:
    """sgl-router's test: both the gap and the ratio past their thresholds.

    >>> is_imbalanced([100, 30], 64, 1.5), is_imbalanced([100, 40], 64, 1.5)  # gap 70; 60
    (True, False)
    """
    high, low = max(loads), min(loads)
    return high - low > abs_threshold and high > low * rel_threshold


class CacheAware:
    """Approximate trees + imbalance fallback. Scores: each worker's match ratio (balanced) or
    its load (imbalanced)."""

    name = "cache-aware"

    def __init__(self, num_replicas: int, config: CacheAwareConfig | None = None) -> None:
        self.num_replicas = num_replicas
        self.config = config or CacheAwareConfig()
        self.tree = ApproxTree(num_replicas)
        self._next_eviction = self.config.eviction_interval_secs

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        cfg = self.config
        self._maybe_evict(now)
        counts = [x.requests for x in loads]
        if is_imbalanced(counts, cfg.balance_abs_threshold, cfg.balance_rel_threshold):
            rank = min(range(len(counts)), key=lambda r: (counts[r], r))
            self.tree.insert(req.block_keys, rank, now)
            return Decision(rank, "imbalance", tuple(float(c) for c in counts),
                            f"imbalanced ({max(counts)} vs {min(counts)} requests in flight): "
                            f"shortest queue, replica {rank}")
        match = self.tree.match(req.block_keys)
        ratios = tuple(d * cfg.block_size / max(req.num_tokens, 1) for d in match.depths)
        best = max(ratios, default=0.0)
        if best > cfg.cache_threshold:
            rank = match.tenants[0]
            reason = "cache-hit"
            why = (f"match ratio {best:.0%} > cache_threshold {cfg.cache_threshold:.0%}: "
                   f"replica {rank} was sent this prefix")
        else:
            sizes = self.tree.sizes
            rank = min(range(len(sizes)), key=lambda r: (sizes[r], r))
            reason = "cache-miss"
            why = (f"best match ratio {best:.0%} <= cache_threshold "
                   f"{cfg.cache_threshold:.0%}: smallest tree, replica {rank}")
        self.tree.insert(req.block_keys, rank, now)
        return Decision(rank, reason, ratios, why)

    def _maybe_evict(self, now: float) -> None:
        interval = self.config.eviction_interval_secs
        if interval <= 0 or now < self._next_eviction:
            return
        self.tree.evict(max(1, self.config.max_tree_size // self.config.block_size))
        while self._next_eviction <= now:
            self._next_eviction += interval
