"""The host tier behind the cluster's routers: `python -m radix cluster TRACE --capacity N
--host-ratio 2,4`.

The cluster run (radix/cluster/sim.py) decides where each request goes; then each replica's
requests, in arrival order, run through that replica's own HostTierCache (radix/hosttier/
replay.py: one request at a time, device only and then with a host pool of each ratio), and the
replicas' prompt tokens are summed, split into device hits / host hits (loaded back over PCIe)
/ misses. So the routers (cache-aware's own approximate tree, kv-overlap's block index, the
load counts) decide as they do without HiCache, which is what SGLang's gateway sees: it keeps
its own tree and does not hear of host residency.
Leaves out: the load back's time in the routers' load figures and in TTFT (the cluster's
timing is the device-only engine's), batching within a replica (see replay.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.hosttier.replay import TierRun, compare_host_tiers
from radix.traces.trace import Trace


def replica_traces(trace: Trace, decisions: Sequence[tuple[str, int, str]],
                   replicas: int) -> list[Trace]:
    """Each replica's requests, in arrival order, from the cluster's (rid, rank, reason)."""
    rank = {rid: r for rid, r, _ in decisions}
    parts: list[list] = [[] for _ in range(replicas)]
    for req in trace.requests:
        parts[rank[req.rid]].append(req)
    return [Trace(trace.format, reqs, trace.token_scale, source=trace.source) for reqs in parts]


def sum_runs(runs: Sequence[TierRun]) -> TierRun:
    """The replicas' runs of one configuration added up (name and host pool of one replica)."""
    first = runs[0]
    totals = [sum(getattr(r, f) for r in runs) for f in TierRun._fields[2:]]
    return TierRun(first.name, first.host_tokens, *totals)


def cluster_host_tiers(trace: Trace, decisions: Sequence[tuple[str, int, str]], replicas: int,
                       capacity: int, ratios: Sequence[float],
                       write_policy: str = "write_through") -> list[TierRun]:
    """Device only, then one run per host ratio, each summed over the replicas; `capacity` is
    one replica's device pool (real tokens), each host pool `ratio` times it."""
    per = [compare_host_tiers(t, capacity, ratios, write_policy)
           for t in replica_traces(trace, decisions, replicas) if t.requests]
    if not per:
        return []
    return [sum_runs([runs[k] for runs in per]) for k in range(len(ratios) + 1)]
