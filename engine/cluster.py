"""N engine replicas behind one router: what `python -m engine serve --dp N` runs in one process.

Each replica is an `EngineService` (its own KV pool, radix tree and block cache; the weights are
shared) publishing its KV events on its own ZMQ port (endpoint port + rank, as vLLM's data
parallel ranks do). The router is round robin, or prefix-aware as Dynamo's KV router: it keeps
each replica's block cache rebuilt from the very batches that replica publishes (radix/watch's
`WorkerCache`, fed synchronously, so a finished request's blocks are indexed before its caller
hears back) and sends a prompt to the replica holding most of its leading blocks (ties: fewest
requests in flight, then round robin). Leaves out: load-aware cost weights, replica failover.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from engine.kv_publisher import ZmqEventPublisher
from engine.model import LoadedModel
from engine.service import EngineService
from radix.blocks.hashing import HASH_ALGOS, VLLM_NONE_HASH_SEED, BlockHasher, hash_to_int64
from radix.blocks.kv_events import EventBatch
from radix.watch.view import WorkerCache

ROUTERS = ("prefix", "round_robin")


@dataclass(frozen=True)
class ClusterConfig:
    dp: int = 1  # replicas
    capacity_tokens: int = 16_384  # KV pool of each replica, tokens
    block_size: int = 16  # vLLM's block size for the block cache and its events
    router: str = "prefix"  # one of ROUTERS
    kv_endpoint: str | None = "tcp://*:5557"  # PUB of rank 0 (rank r: port + r); None: no events
    kv_replay_endpoint: str | None = "tcp://*:5567"  # ROUTER of rank 0 (rank r: port + r)
    kv_bind: bool = True  # bind the PUB endpoint as named; False: vLLM's rule (a concrete host
    #                       such as tcp://127.0.0.1:5557 is connected to, for a proxy there)
    hash_algo: str = "vllm-sha256"  # how blocks are hashed (radix/blocks/hashing.py HASH_ALGOS)
    hash_seed: str = VLLM_NONE_HASH_SEED  # vLLM's NONE_HASH seed (its PYTHONHASHSEED, if set)
    buffer_steps: int = 10_000  # batches each replay buffer keeps
    topic: str = ""
    max_history: int = 1_000  # finished requests, steps and lookups each replica keeps

    def __post_init__(self) -> None:
        if self.dp < 1:
            raise ValueError(f"--dp must be >= 1, got {self.dp}")
        if self.router not in ROUTERS:
            raise ValueError(f"--router must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        if self.block_size < 1 or self.capacity_tokens < 1:
            raise ValueError("block size and capacity must be >= 1")
        if self.hash_algo not in HASH_ALGOS:
            raise ValueError(f"--hash must be one of {', '.join(HASH_ALGOS)}, "
                             f"got {self.hash_algo!r}")

    @property
    def hasher(self) -> BlockHasher:
        return BlockHasher(self.hash_algo, self.hash_seed)


class _Tee:
    """The replica's batch sink: the router's index first (same thread), then the publisher."""

    def __init__(self, index: WorkerCache, lock: threading.Lock, publisher: Any) -> None:
        self.index, self.lock, self.publisher = index, lock, publisher

    def publish(self, batch: EventBatch) -> None:
        with self.lock:
            self.index.apply(batch)
        if self.publisher is not None:
            self.publisher.publish(batch)


class Route(NamedTuple):
    rank: int
    overlaps: tuple[int, ...]  # leading blocks of the prompt each replica holds


class Cluster:
    """The replicas, their publishers and the router."""

    def __init__(self, loaded: LoadedModel, config: ClusterConfig,
                 service_factory: Callable[..., EngineService] = EngineService) -> None:
        self.loaded, self.config = loaded, config
        self.indexes = [WorkerCache() for _ in range(config.dp)]
        self._index_lock = threading.Lock()
        self.publishers: list[ZmqEventPublisher | None] = []
        self.replicas: list[EngineService] = []
        self._rr = itertools.count()
        self.in_flight = [0] * config.dp
        self._flight_lock = threading.Lock()
        hasher = config.hasher  # one for every replica: equal blocks, equal hashes
        try:
            for rank in range(config.dp):
                pub = None
                if config.kv_endpoint is not None:
                    pub = ZmqEventPublisher(rank, config.kv_endpoint, config.kv_replay_endpoint,
                                            config.buffer_steps, topic=config.topic,
                                            bind=True if config.kv_bind else None)
                self.publishers.append(pub)
                tee = _Tee(self.indexes[rank], self._index_lock, pub)
                self.replicas.append(service_factory(
                    loaded, config.capacity_tokens, block_size=config.block_size,
                    kv_events=tee, max_history=config.max_history, max_events=10_000,
                    hash_algo=hasher))
        except Exception:
            self.close()
            raise

    def route(self, token_ids: list[int]) -> Route:
        """The replica for a prompt: round robin, or the most leading blocks cached."""
        with self._index_lock:
            overlaps = tuple(ix.overlap(token_ids) for ix in self.indexes)
        turn = next(self._rr) % self.config.dp
        if self.config.router == "round_robin" or max(overlaps) == 0:
            return Route(turn, overlaps)
        best = max(overlaps)
        with self._flight_lock:
            candidates = [r for r, o in enumerate(overlaps) if o == best]
            load = min(self.in_flight[r] for r in candidates)
            candidates = [r for r in candidates if self.in_flight[r] == load]
        return Route(candidates[turn % len(candidates)], overlaps)

    def started(self, rank: int) -> None:
        with self._flight_lock:
            self.in_flight[rank] += 1

    def ended(self, rank: int) -> None:
        with self._flight_lock:
            self.in_flight[rank] -= 1

    def publisher_info(self) -> list[dict[str, Any]]:
        return [{"rank": r, "endpoint": p.endpoint if p else None,
                 "replay_endpoint": p.replay_endpoint if p else None,
                 "pub_binds": p.binds if p else None}
                for r, p in enumerate(self.publishers)]

    def block_cache(self, rank: int) -> list[dict[str, Any]]:
        """The replica's own block cache (its shadow's pool), as the events name blocks:
        hash (low 64 bits), parent, copies, and the full digests to check token ids by."""
        def read() -> list[dict[str, Any]]:
            pool = self.replicas[rank].shadow.manager.pool
            out = []
            for h in pool.cached_block_hash_to_block:
                blocks = pool.cached_blocks(h)
                parent = blocks[0].parent_hash
                out.append({"hash": hash_to_int64(h), "copies": len(blocks),
                            "parent": None if parent is None else hash_to_int64(parent),
                            "hash_hex": h.hex(), "parent_hex": parent.hex() if parent else None})
            return out
        return self.replicas[rank].call(read)

    def reset_prefix_cache(self) -> list[bool]:
        return [r.reset_prefix_cache() for r in self.replicas]

    def close(self) -> None:
        for replica in self.replicas:
            try:
                replica.close(timeout=10, cancel=True)
            except RuntimeError:
                pass  # its loop died; its handles were told why
        for pub in self.publishers:
            if pub is not None:
                pub.close()
