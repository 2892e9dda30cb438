"""`kv-overlap`: the KV-event-fed router of NVIDIA Dynamo's KV router (and llm-d's precise
prefix-cache scorer): a global index of which blocks each worker holds, built only from the KV
events the workers publish (BlockStored / BlockRemoved / AllBlocksCleared, the stream `radix
watch` reads), and a cost per worker

    cost = overlap_score_weight x prefill_blocks + decode_blocks

prefill_blocks: the prompt's blocks minus those the worker already holds (leading, chained);
decode_blocks: the worker's queued + running tokens in blocks. Lowest cost wins (ties: in
turn, from a start that rotates each request, so cold traffic spreads; Dynamo draws one);
with `router_temperature` > 0 the worker is drawn from a softmax over the costs normalised
to [0, 1]. Defaults follow Dynamo's KvRouterConfig: `overlap_score_weight` 1.0,
`router_temperature` 0.0. Leaves out: Dynamo's per-worker active-prefill tracking beyond the
token load, its approximate mode (no events) and TTL.
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from radix.cluster.base import Decision, Load, RouteRequest
from radix.watch.view import WorkerCache


class BlockIndex(Protocol):
    block_size: int

    def overlap(self, rank: int, req: RouteRequest) -> int:
        """Leading full blocks of the prompt that replica `rank` holds."""
        ...


class EventIndex:
    """kv-overlap's index in `engine serve`: one `WorkerCache` per replica (radix/watch), each
    rebuilt by a subscriber from the KV-event batches that replica publishes; matched on the
    prompt's token ids. `lock` is the one the subscriber holds while it applies a batch.

    >>> from radix.blocks.kv_events import BlockStored, EventBatch
    >>> caches = [WorkerCache(), WorkerCache()]
    >>> _ = caches[1].apply(EventBatch(0.0, (BlockStored((5,), None, (1, 2), 2, None, "GPU",
    ...                                                  None),)))
    >>> ix = EventIndex(caches, 2); [ix.overlap(r, RouteRequest("a", (), 3, None, [1, 2, 3]))
    ...                               for r in (0, 1)]
    [0, 1]
    """

    def __init__(self, caches: Sequence[WorkerCache], block_size: int,
                 lock: threading.Lock | None = None) -> None:
        self.caches, self.block_size = list(caches), block_size
        self.lock = lock or threading.Lock()

    def overlap(self, rank: int, req: RouteRequest) -> int:
        with self.lock:
            return self.caches[rank].overlap(req.token_ids)


class KeyIndex:
    """The simulator's index: per replica, the block keys (radix.cluster.base.block_keys) its
    forward passes stored, told when a prefill ends (`stored`); past `capacity_blocks` the
    least recently stored or matched key is removed, as the replica's LRU would (the simulated
    replicas publish no BlockRemoved of their own: a deliberate approximation).

    >>> ix = KeyIndex(2, block_size=4, capacity_blocks=2); ix.stored(0, (7, 8, 9))
    >>> ix.overlap(0, RouteRequest("a", (7, 8), 8)), ix.overlap(0, RouteRequest("b", (8, 9), 8))
    (0, 2)
    """

    def __init__(self, num_replicas: int, block_size: int,
                 capacity_blocks: int | None = None) -> None:
        self.block_size, self.capacity = block_size, capacity_blocks
        self.blocks: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_replicas)]

    def stored(self, rank: int, keys: Sequence[int]) -> None:
        held = self.blocks[rank]
        for key in keys:
            held[key] = None
            held.move_to_end(key)
        if self.capacity is not None:
            while len(held) > self.capacity:
                held.popitem(last=False)

    def overlap(self, rank: int, req: RouteRequest) -> int:
        held, n = self.blocks[rank], 0
        for key in req.block_keys:
            if key not in held:
                break
            n += 1
        return n


@dataclass(frozen=True)
class KvOverlapConfig:
    overlap_score_weight: float = 1.0  # Dynamo KvRouterConfig.overlap_score_weight
    router_temperature: float = 0.0  # Dynamo KvRouterConfig.router_temperature (0: argmin)

    def __post_init__(self) -> None:
        if self.overlap_score_weight < 0 or self.router_temperature < 0:
            raise ValueError("overlap_score_weight and router_temperature must be >= 0")


class KvOverlap:
    """Scores: each worker's cost (lower is better).

    >>> class Ix:
    ...     block_size = 16
    ...     def overlap(self, rank, req): return (0, 6)[rank]
    >>> r = KvOverlap(2, Ix()); d = r.route(RouteRequest("a", (), 160), [Load(1, 32), Load(1, 64)])
    >>> d.rank, d.scores  # 10 blocks: 1 x 10 + 2 = 12 against 1 x 4 + 4 = 8
    (1, (12.0, 8.0))
    """

    name = "kv-overlap"

    def __init__(self, num_replicas: int, index: BlockIndex,
                 config: KvOverlapConfig | None = None, seed: int = 0) -> None:
        self.num_replicas, self.index = num_replicas, index
        self.config = config or KvOverlapConfig()
        self.rng = random.Random(seed)
        self._turn = 0  # rotates the start of the tie-break

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        bs = self.index.block_size
        blocks = -(-req.num_tokens // bs)
        overlaps = [self.index.overlap(r, req) for r in range(len(loads))]
        costs = tuple(self.config.overlap_score_weight * (blocks - o) + -(-x.tokens // bs)
                      for o, x in zip(overlaps, loads))
        rank = self._pick(costs)
        return Decision(rank, "lowest-cost", tuple(float(c) for c in costs),
                        f"replica {rank} holds {overlaps[rank]} of {blocks} blocks; cost "
                        f"{costs[rank]:g} (prefill + load, blocks) is the lowest")

    def _pick(self, costs: Sequence[float]) -> int:
        t = self.config.router_temperature
        turn, self._turn = self._turn, self._turn + 1
        if t == 0 or len(costs) == 1:  # ties: the first at or after this turn's start
            n, low = len(costs), min(costs)
            return min((r for r in range(n) if costs[r] == low), key=lambda r: (r - turn) % n)
        low, high = min(costs), max(costs)
        span = (high - low) or 1.0
        weights = [math.exp(-((c - low) / span) / t) for c in costs]
        return self.rng.choices(range(len(costs)), weights)[0]
