"""`prefix-affinity`: Ray Serve LLM's PrefixCacheAffinityRouter (PrefixAwarePow2ReplicaRouter).

Follows `ray/llm/_internal/serve/request_router/prefix_aware/prefix_aware_router.py` and its
documented `request_router_kwargs`: first the load check on queue lengths (requests in
flight): imbalanced when `max - min > imbalanced_threshold`, then plain power of two choices.
Balanced: the prefix tree's match rate (matched / prompt length); below `match_rate_threshold`
the candidates are the replicas with the smallest trees, else the replicas with the longest
match; of the candidates, the shortest queue wins (ties: lowest id; upstream: random). The
routed prompt is inserted into the tree. Eviction is off by default (`do_eviction=False`); when
on, a tree past `eviction_threshold_chars` is trimmed to `eviction_target_chars` every
`eviction_interval_secs`. Deliberate difference: blocks of tokens, not characters.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from radix.cluster.approx import ApproxTree
from radix.cluster.base import Decision, Load, RouteRequest


@dataclass(frozen=True)
class PrefixAffinityConfig:
    imbalanced_threshold: int = 10  # initialize_state default, queue-length gap
    match_rate_threshold: float = 0.1  # initialize_state default
    do_eviction: bool = False  # initialize_state default
    eviction_threshold_chars: int = 400_000  # default (here tokens)
    eviction_target_chars: int = 360_000  # default (here tokens)
    eviction_interval_secs: float = 10.0  # default
    block_size: int = 16  # tokens per block key of the routed prompts

    def __post_init__(self) -> None:
        if self.imbalanced_threshold < 0 or not 0.0 <= self.match_rate_threshold <= 1.0:
            raise ValueError("imbalanced_threshold must be >= 0, match_rate_threshold in [0, 1]")
        if self.block_size < 1 or self.eviction_target_chars > self.eviction_threshold_chars:
            raise ValueError("block_size must be >= 1 and eviction target <= threshold")


class PrefixAffinity:
    """Scores: each replica's match rate (balanced) or queue length (imbalanced)."""

    name = "prefix-affinity"

    def __init__(self, num_replicas: int, config: PrefixAffinityConfig | None = None,
                 seed: int = 0) -> None:
        self.num_replicas = num_replicas
        self.config = config or PrefixAffinityConfig()
        self.tree = ApproxTree(num_replicas)
        self.rng = random.Random(seed)
        self._next_eviction = self.config.eviction_interval_secs

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        cfg = self.config
        self._maybe_evict(now)
        queues = [x.requests for x in loads]
        if max(queues) - min(queues) > cfg.imbalanced_threshold:
            rank, why = self._pow2(queues)
            self.tree.insert(req.block_keys, rank, now)
            return Decision(rank, "imbalance", tuple(float(q) for q in queues),
                            f"imbalanced (queues {max(queues)} vs {min(queues)}): {why}")
        match = self.tree.match(req.block_keys)
        rates = tuple(d * cfg.block_size / max(req.num_tokens, 1) for d in match.depths)
        best = max(rates, default=0.0)
        if best < cfg.match_rate_threshold or not match.tenants:
            candidates, reason = self.tree.smallest(), "smallest-tree"
            what = f"match rate {best:.0%} < {cfg.match_rate_threshold:.0%}: smallest trees"
        else:
            candidates, reason = list(match.tenants), "prefix-match"
            what = f"match rate {best:.0%}: longest match"
        rank = min(candidates, key=lambda r: (queues[r], r))
        self.tree.insert(req.block_keys, rank, now)
        return Decision(rank, reason, rates,
                        f"{what} {candidates}; shortest queue among them, replica {rank}")

    def _pow2(self, queues: list[int]) -> tuple[int, str]:
        if self.num_replicas == 1:
            return 0, "the only replica"
        a, b = self.rng.sample(range(self.num_replicas), 2)
        rank = b if queues[b] < queues[a] else a
        return rank, f"power of two drew {a} and {b}, replica {rank} has the shorter queue"

    def _maybe_evict(self, now: float) -> None:
        cfg = self.config
        if not cfg.do_eviction or now < self._next_eviction:
            return
        self.tree.evict(cfg.eviction_threshold_chars // cfg.block_size,
                        cfg.eviction_target_chars // cfg.block_size)
        while self._next_eviction <= now:
            self._next_eviction += cfg.eviction_interval_secs
