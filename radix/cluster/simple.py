"""The routers that ignore the prompt: round robin, random, least load, power of two, session.

`round-robin` takes replicas in turn; `random` draws one (seeded); `least-load` takes the
fewest queued + running tokens (ties: lowest id); `power-of-two` draws two distinct replicas and
takes the less loaded by tokens (ties: the first drawn), Mitzenmacher's "power of two choices" as
Ray Serve's default router uses it (with queue lengths there); `session` places each session id
on a consistent-hash ring (`VNODES` points per replica, 64-bit BLAKE2b), so a conversation's
turns land on one replica and adding a replica moves only ~1/N of the sessions. A request with
no session id is hashed by its rid. Leaves out: weights, health.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence

from radix.cluster.base import Decision, Load, RouteRequest, stable_hash

VNODES = 64  # ring points per replica (a common choice; the spread evens out with more)


class RoundRobin:
    """Replicas in turn: 0, 1, ..., N-1, 0, ...

    >>> r = RoundRobin(3); [r.route(RouteRequest("a", (), 1), [Load(0, 0)] * 3).rank
    ...                     for _ in range(4)]
    [0, 1, 2, 0]
    """

    name = "round-robin"

    def __init__(self, num_replicas: int) -> None:
        self.num_replicas, self._next = num_replicas, 0

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        rank = self._next
        self._next = (rank + 1) % self.num_replicas
        return Decision(rank, "turn", tuple(float(r == rank) for r in range(len(loads))),
                        f"round robin: replica {rank}'s turn")


class RandomRouter:
    """One replica drawn uniformly from a seeded `random.Random`."""

    name = "random"

    def __init__(self, num_replicas: int, seed: int = 0) -> None:
        self.num_replicas, self.rng = num_replicas, random.Random(seed)

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        rank = self.rng.randrange(self.num_replicas)
        return Decision(rank, "random", tuple(float(r == rank) for r in range(len(loads))),
                        f"random draw: replica {rank}")


class LeastLoad:
    """The fewest queued + running tokens; ties to the lowest id.

    >>> LeastLoad(3).route(RouteRequest("a", (), 1), [Load(1, 50), Load(2, 20), Load(0, 20)]).rank
    1
    """

    name = "least-load"

    def __init__(self, num_replicas: int) -> None:
        self.num_replicas = num_replicas

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        rank = min(range(len(loads)), key=lambda r: (loads[r].tokens, r))
        return Decision(rank, "least-load", tuple(float(x.tokens) for x in loads),
                        f"least load: replica {rank} has {loads[rank].tokens:,} tokens queued "
                        f"or running, the fewest")


class PowerOfTwo:
    """Two distinct replicas drawn (seeded), the one with fewer tokens (ties: the first drawn)."""

    name = "power-of-two"

    def __init__(self, num_replicas: int, seed: int = 0) -> None:
        self.num_replicas, self.rng = num_replicas, random.Random(seed)

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        if self.num_replicas == 1:
            a = b = 0
        else:
            a, b = self.rng.sample(range(self.num_replicas), 2)
        rank = b if loads[b].tokens < loads[a].tokens else a
        return Decision(rank, "power-of-two", tuple(float(x.tokens) for x in loads),
                        f"power of two: drew {a} ({loads[a].tokens:,} tokens) and {b} "
                        f"({loads[b].tokens:,}); {rank} is less loaded")


class SessionRouter:
    """Consistent hashing of the session id onto a ring of VNODES points per replica: the
    first point at or after the session's hash (wrapping) names the replica."""

    name = "session"

    def __init__(self, num_replicas: int, vnodes: int = VNODES) -> None:
        self.num_replicas = num_replicas
        points = sorted((stable_hash(f"replica-{r}-{v}"), r)
                        for r in range(num_replicas) for v in range(vnodes))
        self._hashes = [h for h, _ in points]
        self._owners = [r for _, r in points]

    def owner(self, session: str) -> int:
        i = bisect.bisect_left(self._hashes, stable_hash(session)) % len(self._hashes)
        return self._owners[i]

    def route(self, req: RouteRequest, loads: Sequence[Load], now: float = 0.0) -> Decision:
        key = req.session if req.session is not None else req.rid
        rank = self.owner(key)
        what = "session" if req.session is not None else "request id (no session)"
        return Decision(rank, "session", tuple(float(r == rank) for r in range(len(loads))),
                        f"consistent hash of {what} {key!r} lands on replica {rank}")
