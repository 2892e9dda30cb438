"""Why a prompt hit the host tier: each request's prompt split into device hit / host hit (loaded
back) / miss, and for every host hit the device eviction that demoted its KV to the host.

Runs the trace through `replay_host_tier` (requests one at a time, replay.py) with a sink that
files every NodeDemoted under the request being served and the move that evicted it: room to
load that request's own host hit back (between the load's host lock and its KVLoadedBack or
release, moves.py `load_back`) or room for its new tokens (the allocation). A split passes the
record to the new upper node; a KVLoadedBack names the nodes moved, and their records are the
answer. `host_recomputed` counts miss tokens the host held but that were computed again (under
the load-back threshold, or the prompt's last token): the insert restored them (DeviceRestored).
`lost` counts miss tokens an earlier request had cached that are on neither tier now, and
`lost_by` names the removal that took the first of them (losses.py: evicted from host, or
dropped from the device without a host copy). The rest of a miss was never cached (first seen).
Leaves out: namespaces (the replay runs token ids alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from radix import events as ev
from radix.hosttier.losses import Loss, LossTracker
from radix.hosttier.replay import TierRun, replay_host_tier, trace_units
from radix.hosttier.requests import Served
from radix.traces.trace import Trace

CAUSES = ("allocation", "load back")


class Demotion(NamedTuple):
    """Why one loaded-back node was on the host: the device eviction that demoted it."""

    node_id: int  # the node as it was loaded back
    tokens: int  # real tokens of it loaded back
    by_rid: str  # the request being served when the device evicted it
    by_index: int  # that request's place in the trace
    cause: str  # "allocation": room for that request's new tokens; "load back": room to load
    # that request's own host hit back (CAUSES)


class TierRequest(NamedTuple):
    rid: str
    index: int  # place in the trace (arrival order)
    prompt_tokens: int
    device_hit: int  # real tokens found on the device
    host_hit: int  # real tokens loaded back from the host
    miss: int  # real tokens computed
    host_recomputed: int  # of the misses: tokens the host held (restored by the insert)
    lost: int  # of the misses: tokens cached earlier, on neither tier now
    admitted: bool  # False: larger than the device pool, nothing cached
    demotions: tuple[Demotion, ...]  # why each loaded-back node was on the host, root first
    lost_by: Loss | None  # the removal that took the first lost token


class HostTierExplanation(NamedTuple):
    run: TierRun  # the run's totals (replay.py)
    eviction: str  # the device and host eviction policy
    write_policy: str
    requests: list[TierRequest]  # in trace order

    def by_cause(self) -> dict[str, int]:
        """Host-hit tokens per CAUSES entry of the demotion that put them on the host."""
        out = dict.fromkeys(CAUSES, 0)
        for r in self.requests:
            for d in r.demotions:
                out[d.cause] += d.tokens
        return out

    def top(self, n: int = 10) -> list[TierRequest]:
        """The requests that loaded the most back, most first (ties: trace order)."""
        hits = [r for r in self.requests if r.host_hit]
        return sorted(hits, key=lambda r: (-r.host_hit, r.index))[:n]

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run._asdict(), "eviction": self.eviction,
                "write_policy": self.write_policy, "by_cause": self.by_cause(),
                "requests": [r._asdict() | {"demotions": [d._asdict() for d in r.demotions],
                                            "lost_by": r.lost_by and r.lost_by._asdict()}
                             for r in self.requests]}


class _Recorder:
    """The sink: node places and removals (LossTracker), the last demotion of every live node,
    and per request the nodes loaded back and the spans restored."""

    def __init__(self, losses: LossTracker) -> None:
        self.losses = losses
        self.demoted: dict[int, tuple[int, str]] = {}  # node id -> (request index, cause)
        self.index = 0  # the request being served
        self.loading = False  # between a load back's host lock and its load or release
        self.loaded: list[tuple[int, int]] = []  # this request's (node id, tokens) loaded
        self.restored: list[tuple[int, int]] = []  # this request's restored nodes' spans

    def emit(self, e: ev.Event) -> None:
        self.losses.apply(e, self.index)
        if isinstance(e, ev.HostLockChanged):
            self.loading = e.delta > 0  # only load_back takes host locks in serve_request
        elif isinstance(e, ev.NodeDemoted):
            self.demoted[e.node_id] = (self.index, "load back" if self.loading else "allocation")
        elif isinstance(e, ev.NodeSplit) and e.node_id in self.demoted:
            self.demoted[e.new_node_id] = self.demoted[e.node_id]
        elif isinstance(e, ev.KVLoadedBack):
            self.loading = False
            self.loaded += [(i, self.losses.num_units(i)) for i in e.node_ids]
        elif isinstance(e, ev.DeviceRestored):
            self.restored.append(self.losses.span(e.node_id))
        elif isinstance(e, ev.DeviceLeafDropped | ev.HostLeafEvicted):
            self.demoted.pop(e.node_id, None)


def explain_host_tier(trace: Trace, capacity: int, host_ratio: float,
                      write_policy: str = "write_through", eviction: str = "lru"
                      ) -> HostTierExplanation:
    """The trace through a device pool of `capacity` real tokens and a host pool of
    `host_ratio` times it; every request's split, and why each host hit was on the host.

    Device 24, host 2x (49), write-through, LRU; A, B, C 12 distinct tokens each, then A, B:
    A and B fill the device; C's allocation evicts the LRU leaf A (backed up at insert:
    demoted); A's match of A[:-1] finds 11 tokens on host (>= the threshold 10), and loading
    them evicts B; B in turn finds 11 on host and its load evicts C. Nothing is lost.
    >>> from radix.traces.trace import TraceRequest
    >>> toks = {"a": range(1, 13), "b": range(101, 113), "c": range(201, 213)}
    >>> t = Trace("request", [TraceRequest(f"{r}{k}", float(k), tuple(toks[r]), 1)
    ...                       for k, r in enumerate("abcab")])
    >>> e = explain_host_tier(t, 24, 2.0)
    >>> [(r.device_hit, r.host_hit, r.miss) for r in e.requests][3:]
    [(0, 11, 1), (0, 11, 1)]
    >>> [(d.by_rid, d.cause) for r in e.requests[3:] for d in r.demotions]
    [('c2', 'allocation'), ('a3', 'load back')]
    >>> sum(r.lost for r in e.requests)
    0
    """
    if not host_ratio > 0:
        raise ValueError(f"host_ratio must be > 0, got {host_ratio!r}")
    scale, units = trace_units(trace)
    rids = [r.rid for r in trace.requests]
    rec = _Recorder(LossTracker([u + reply for u, reply, _ in units],
                                [len(u) for u, _, _ in units], rids))
    rows: list[TierRequest] = []

    def served(k: int, got: Served) -> None:
        demotions = tuple(Demotion(i, n * scale, rids[rec.demoted[i][0]], *rec.demoted[i])
                          for i, n in rec.loaded)
        restored = min(sum(b - a for a, b in rec.restored) * scale, got.miss)
        lost, by = 0, None
        if got.admitted:
            lost, by = rec.losses.lost(k, (got.device_hit + got.host_hit) // scale, rec.restored)
            lost = min(lost * scale, got.miss - restored)
            rec.losses.served(k)
        rows.append(TierRequest(rids[k], k, got.device_hit + got.host_hit + got.miss,
                                got.device_hit, got.host_hit, got.miss, restored,
                                lost, got.admitted, demotions, by if lost else None))
        rec.index, rec.loaded, rec.restored, rec.loading = k + 1, [], [], False

    run = replay_host_tier(trace, capacity, host_ratio, write_policy, eviction, sink=rec,
                           on_request=served)
    return HostTierExplanation(run, eviction, write_policy, rows)


def explain_host_tiers(trace: Trace, capacity: int, ratios: Sequence[float],
                       write_policy: str = "write_through", eviction: str = "lru"
                       ) -> list[HostTierExplanation]:
    """One explanation per host ratio."""
    return [explain_host_tier(trace, capacity, r, write_policy, eviction) for r in ratios]
