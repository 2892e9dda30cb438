"""N engine replicas behind one router: what `python -m engine serve --dp N` runs in one process.

Each replica is an `EngineService` (its own KV pool, radix tree and block cache; the weights are
shared) publishing its KV events on its own ZMQ port (endpoint port + rank, as vLLM's data
parallel ranks do). The router is any of radix.cluster's ROUTERS, the very objects the simulator
uses. `kv-overlap` reads a block index that a subscriber (radix/watch's `Watcher`, in a thread
of its own) rebuilds from the replicas' published KV-event streams over ZMQ, as it would from
vLLM or SGLang workers; it drains what has arrived before each decision. Loads are the requests
and tokens (prompt + max_tokens) in flight per replica. The HTTP server passes the request's
conversation id (engine/openai_api.py `session_of`); `session` hashes the request's id when
there is none. A replica whose loop died is out of every router's rotation at once (radix's
`failover`: its requests go to the least-loaded live replica), logged once with its cause, and
`revive_after_s` later a fresh replica takes its rank (an AllBlocksCleared on its stream first, so
watchers and kv-overlap's index forget the dead one's blocks).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from engine.kv_publisher import ZmqEventPublisher
from engine.model import LoadedModel
from engine.service import EngineService
from radix.blocks.hashing import HASH_ALGOS, VLLM_NONE_HASH_SEED, BlockHasher, hash_to_int64
from radix.blocks.kv_events import EventBatch
from radix.cluster import ROUTERS as SHARED_ROUTERS
from radix.cluster import (
    Decision,
    EventIndex,
    Load,
    RouteRequest,
    block_keys,
    failover,
    make_router,
)
from radix.events import AllBlocksCleared
from radix.watch.subscriber import Watcher, parse_endpoint

log = logging.getLogger("engine.cluster")

ALIASES = {"prefix": "kv-overlap", "round_robin": "round-robin"}  # the names of before
ROUTERS = SHARED_ROUTERS + tuple(ALIASES)


@dataclass(frozen=True)
class ClusterConfig:
    dp: int = 1  # replicas
    capacity_tokens: int = 16_384  # KV pool of each replica, tokens
    block_size: int = 16  # vLLM's block size for the block cache and its events
    router: str = "kv-overlap"  # one of ROUTERS
    kv_endpoint: str | None = "tcp://*:5557"  # PUB of rank 0 (rank r: port + r); None: no events
    kv_replay_endpoint: str | None = "tcp://*:5567"  # ROUTER of rank 0 (rank r: port + r)
    kv_bind: bool = True  # bind the PUB endpoint as named; False: vLLM's rule (a concrete host
    #                       such as tcp://127.0.0.1:5557 is connected to, for a proxy there)
    hash_algo: str = "vllm-sha256"  # how blocks are hashed (radix/blocks/hashing.py HASH_ALGOS)
    hash_seed: str = VLLM_NONE_HASH_SEED  # vLLM's NONE_HASH seed (its PYTHONHASHSEED, if set)
    buffer_steps: int = 10_000  # batches each replay buffer keeps
    topic: str = ""
    max_history: int = 1_000  # finished requests, steps and lookups each replica keeps
    seed: int = 0  # the seeded routers' seed
    host_ratio: float | None = None  # the host tier per replica (engine/hosttier.py); None: off
    write_policy: str = "write_through"  # the host tier's write policy
    revive_after_s: float | None = 5.0  # a dead replica is replaced this long after it died
    #                                     (None: never; it stays out of rotation)

    def __post_init__(self) -> None:
        if self.dp < 1:
            raise ValueError(f"--dp must be >= 1, got {self.dp}")
        if self.router not in ROUTERS:
            raise ValueError(f"--router must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        if self.block_size < 1 or self.capacity_tokens < 1:
            raise ValueError("block size and capacity must be >= 1")
        if self.router_name == "kv-overlap" and self.kv_endpoint is None:
            raise ValueError("--router kv-overlap reads the replicas' KV events: it needs "
                             "--kv-events-endpoint (not 'off')")
        if self.hash_algo not in HASH_ALGOS:
            raise ValueError(f"--hash must be one of {', '.join(HASH_ALGOS)}, "
                             f"got {self.hash_algo!r}")

    @property
    def hasher(self) -> BlockHasher:
        return BlockHasher(self.hash_algo, self.hash_seed)

    @property
    def router_name(self) -> str:
        """The shared router's name (old aliases resolved)."""
        return ALIASES.get(self.router, self.router)


class Route(NamedTuple):
    rank: int
    decision: Decision  # the router's reason, scores and sentence


class _EventFeed:
    """A `Watcher` on every replica's PUB (and replay) endpoint, polled in a daemon thread;
    its streams' caches are kv-overlap's index."""

    def __init__(self, endpoints: list[str], topic: str, block_size: int) -> None:
        self.watcher = Watcher([parse_endpoint(e) for e in endpoints], topic=topic,
                               replay_timeout=2.0)
        self.lock = threading.Lock()
        self.index = EventIndex([s.cache for s in self.watcher.streams], block_size, self.lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kv-overlap-feed", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                read = self.watcher.poll(0)
            if not read:
                time.sleep(0.002)

    def drain(self) -> None:
        with self.lock:
            self.watcher.poll(0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.watcher.close()


class Cluster:
    """The replicas, their publishers and the router."""

    def __init__(self, loaded: LoadedModel, config: ClusterConfig,
                 service_factory: Callable[..., EngineService] = EngineService) -> None:
        self.loaded, self.config = loaded, config
        self.publishers: list[ZmqEventPublisher | None] = []
        self.replicas: list[EngineService] = []
        self.feed: _EventFeed | None = None
        self.in_flight = [0] * config.dp  # requests routed and not ended, per replica
        self.tokens = [0] * config.dp  # their prompt + max_tokens
        self._lock = threading.Lock()  # the router and the loads
        self._ids = itertools.count()
        self._factory = service_factory
        self.died_at: dict[int, float] = {}  # rank -> when its death was seen (monotonic)
        self.revived = [0] * config.dp  # replicas started in place of a dead one, per rank
        try:
            for rank in range(config.dp):
                pub = None
                if config.kv_endpoint is not None:
                    pub = ZmqEventPublisher(rank, config.kv_endpoint, config.kv_replay_endpoint,
                                            config.buffer_steps, topic=config.topic,
                                            bind=True if config.kv_bind else None)
                self.publishers.append(pub)
                self.replicas.append(self._replica(rank))
            index = None
            if config.router_name == "kv-overlap":
                ends = [",".join(e for e in (i["endpoint"], i["replay_endpoint"]) if e)
                        for i in self.publisher_info()]
                self.feed = _EventFeed(ends, config.topic, config.block_size)
                index = self.feed.index
            self.router = make_router(config.router_name, config.dp,
                                      block_size=config.block_size, seed=config.seed,
                                      index=index)
        except Exception:
            self.close()
            raise

    def _replica(self, rank: int) -> EngineService:
        config = self.config
        host = {} if config.host_ratio is None else {
            "host_ratio": config.host_ratio, "write_policy": config.write_policy}
        return self._factory(self.loaded, config.capacity_tokens, block_size=config.block_size,
                             kv_events=self.publishers[rank], max_history=config.max_history,
                             max_events=10_000, hash_algo=config.hasher, **host)

    def route(self, token_ids: list[int], max_tokens: int = 0,
              session: str | None = None) -> Route:
        """The replica for a prompt, by the configured router (kv-overlap first reads the
        KV events that have arrived), never one whose loop died (`failover`). RuntimeError
        when none is live."""
        if self.feed is not None:
            self.feed.drain()
        live = self.live()
        if not any(live):
            raise RuntimeError("no replica is serving: every engine loop died (see the log)")
        req = RouteRequest(f"req-{next(self._ids)}", block_keys(token_ids, self.config.block_size),
                           len(token_ids), session, token_ids, max_tokens)
        with self._lock:
            loads = [Load(n, t) for n, t in zip(self.in_flight, self.tokens)]
            decision = failover(self.router.route(req, loads, time.monotonic()), loads, live)
        return Route(decision.rank, decision)

    def live(self) -> list[bool]:
        """Per rank: its loop runs. A death is logged once, and a replica dead for
        `revive_after_s` is replaced (then it is live again)."""
        now = time.monotonic()
        out = []
        for rank, replica in enumerate(self.replicas):
            if not replica.alive and rank not in self.died_at:
                self.died_at[rank] = now
                log.error("replica %d is down (%s): out of rotation%s", rank,
                          _cause(replica), "" if self.config.revive_after_s is None else
                          f"; a new one starts in {self.config.revive_after_s:g} s")
            after = self.config.revive_after_s
            if rank in self.died_at and after is not None and now - self.died_at[rank] >= after:
                self.revive(rank)
            out.append(self.replicas[rank].alive)
        return out

    def revive(self, rank: int) -> None:
        """Replaces a dead replica with a fresh one (an empty cache): its stream first says
        AllBlocksCleared, so every watcher drops the dead one's blocks."""
        if self.replicas[rank].alive:
            return
        pub = self.publishers[rank]
        if pub is not None:
            pub.publish(EventBatch(time.time(), (AllBlocksCleared(),), None))
        try:
            self.replicas[rank] = self._replica(rank)
        except Exception as exc:  # noqa: BLE001 - stays out of rotation; tried again later
            self.died_at[rank] = time.monotonic()
            log.error("replica %d did not restart: %s: %s", rank, type(exc).__name__, exc)
            return
        self.died_at.pop(rank, None)
        self.revived[rank] += 1
        log.warning("replica %d restarted (an empty cache): back in rotation", rank)

    def started(self, rank: int, tokens: int = 0) -> None:
        with self._lock:
            self.in_flight[rank] += 1
            self.tokens[rank] += tokens

    def ended(self, rank: int, tokens: int = 0) -> None:
        with self._lock:
            self.in_flight[rank] -= 1
            self.tokens[rank] -= tokens

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
        if self.feed is not None:
            self.feed.close()
        for replica in self.replicas:
            try:
                replica.close(timeout=10, cancel=True)
            except RuntimeError:
                pass  # its loop died; its handles were told why
        for pub in self.publishers:
            if pub is not None:
                pub.close()


def _cause(replica: EngineService) -> str:
    error = getattr(replica, "error", None)
    return "closed" if error is None else f"{type(error).__name__}: {error}"
