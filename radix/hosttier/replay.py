"""A trace through the host tier: device only against device + host, the prompt's tokens split
into device hits, host hits (loaded back over PCIe) and misses (prefilled), priced by the cost
model (`CostModel.prefill_seconds`, `CostModel.load_back_seconds`).

Requests run one at a time in arrival order through `serve_request` (requests.py), FCFS, write
policy write_through unless told. A Mooncake trace runs in its 512-token block units (its hash
ids are the keys; capacities are divided by 512; a hit or a load counts whole blocks, and the
last block, whole or partial, is always computed since the match stops before the last unit;
SGLang's load-back threshold of 10 tokens is then 1 block, since a block is 512 tokens);
a request trace runs in tokens, with its recorded reply inserted after the prompt.
"Device only" is the same cache with a host pool of 0 tokens: nothing is ever backed up, so
every device eviction drops its KV, as a cache without HiCache does.
Leaves out: batching, decode, chunked prefill, overlap of loads with compute (SGLang overlaps
load-back with the forward pass layer by layer; the seconds here are the transfer alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from radix import events as ev
from radix.hosttier.cache import HostTierCache
from radix.hosttier.capacity import LOAD_BACK_THRESHOLD, host_token_capacity
from radix.hosttier.requests import Served, serve_request
from radix.request import SlotAllocator
from radix.runs.costs import CostModel
from radix.tokens import is_compact
from radix.traces.mooncake import BLOCK_TOKENS, hash_ids
from radix.traces.trace import Trace


class TierRun(NamedTuple):
    name: str  # "device only" or "host 4x"
    host_tokens: int  # real tokens of host pool (0: device only)
    prompt_tokens: int
    device_hit: int  # real tokens
    host_hit: int  # real tokens loaded back for a prompt
    miss: int  # real tokens prefilled
    loaded_back: int  # real tokens moved host -> device (all loads)
    demoted: int  # real tokens moved device -> host by eviction
    rejected: int  # requests larger than the device pool
    prefill_s: float
    load_s: float

    @property
    def device_rate(self) -> float:
        return self.device_hit / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def host_rate(self) -> float:
        return self.host_hit / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def hit_rate(self) -> float:
        return self.device_rate + self.host_rate


def trace_units(trace: Trace) -> tuple[int, list[tuple[list[int], list[int], int]]]:
    """(real tokens per unit, [(prompt units, reply units, real prompt tokens)]): a Mooncake
    trace in its 512-token blocks (hash ids), a request trace in tokens."""
    if trace.requests and is_compact(trace.requests[0].token_ids):  # Mooncake: block units
        return BLOCK_TOKENS, [(hash_ids(r.token_ids), [], len(r.token_ids))
                              for r in trace.requests]
    return 1, [(list(r.token_ids), list(r.output_ids or ()), len(r.token_ids))
               for r in trace.requests]


def load_back_units(scale: int) -> int:
    """SGLang's load-back threshold (LOAD_BACK_THRESHOLD tokens) in units of `scale` tokens:
    a host hit of k units is k x scale tokens, loaded when that is at least 10, so the
    threshold is ceil(10 / scale) units. `load_back_units(1)` is 10, `load_back_units(512)` 1.
    """
    return -(-LOAD_BACK_THRESHOLD // scale)


def replay_host_tier(trace: Trace, capacity: int, host_ratio: float | None = None,
                     write_policy: str = "write_through", eviction: str = "lru",
                     cost: CostModel | None = None, *, sink: ev.EventSink | None = None,
                     on_request: Callable[[int, Served], None] | None = None) -> TierRun:
    """One run at a device pool of `capacity` real tokens; host_ratio None: device only.
    `sink` hears the cache's events; `on_request(k, served)` is called after the trace's k-th
    request with its prompt split in real tokens (explain.py attributes the events by it)."""
    cost = cost or CostModel()
    scale, reqs = trace_units(trace)
    device = capacity // scale
    if device < 1:
        raise ValueError(f"capacity {capacity:,} is under one {scale}-token unit")
    host = 0 if host_ratio is None else host_token_capacity(device, host_ratio)
    cache = HostTierCache(SlotAllocator(device, check=False), host, write_policy,
                          eviction_policy=eviction, sink=sink,
                          load_back_threshold=load_back_units(scale))
    prompt = dev = hst = miss = rejected = 0
    for k, (units, reply, n) in enumerate(reqs):
        prompt += n
        if len(units) + len(reply) > device:
            rejected += 1
            miss += n
            if on_request is not None:
                on_request(k, Served(0, 0, n, False))
            continue
        got = serve_request(cache, units, reply)
        d, h = min(got.device_hit * scale, n), min(got.host_hit * scale, n)
        h = min(h, n - d)
        dev, hst, miss = dev + d, hst + h, miss + n - d - h
        if on_request is not None:
            on_request(k, Served(d, h, n - d - h, got.admitted))
    counts = cache.counts()
    name = "device only" if host_ratio is None else f"host {host_ratio:g}x"
    return TierRun(name, host * scale, prompt, dev, hst, miss, counts.loaded_back * scale,
                   counts.demoted * scale, rejected, cost.prefill_seconds(miss),
                   cost.load_back_seconds(counts.loaded_back * scale))


def compare_host_tiers(trace: Trace, capacity: int, ratios: Sequence[float],
                       write_policy: str = "write_through", eviction: str = "lru",
                       cost: CostModel | None = None) -> list[TierRun]:
    """Device only, then one run per host ratio."""
    runs = [replay_host_tier(trace, capacity, None, write_policy, eviction, cost)]
    runs += [replay_host_tier(trace, capacity, r, write_policy, eviction, cost) for r in ratios]
    return runs


ROWS = (("device hit rate", lambda r: f"{r.device_rate:.1%}"),
        ("host hit rate (loaded back)", lambda r: f"{r.host_rate:.1%}"),
        ("hit rate, both tiers", lambda r: f"{r.hit_rate:.1%}"),
        ("host pool tokens", lambda r: f"{r.host_tokens:,}"),
        ("tokens prefilled", lambda r: f"{r.miss:,}"),
        ("tokens loaded back", lambda r: f"{r.loaded_back:,}"),
        ("tokens demoted to host", lambda r: f"{r.demoted:,}"),
        ("prefill s (derived)", lambda r: f"{r.prefill_s:.2f}"),
        ("load-back s over PCIe", lambda r: f"{r.load_s:.2f}"),
        ("rejected (too big)", lambda r: f"{r.rejected:,}"))


def tier_table(runs: Sequence[TierRun]) -> str:
    """Metrics down, runs across."""
    lines = [f"{'':<30}" + "".join(f"{r.name:>16}" for r in runs)]
    for label, cell in ROWS:
        lines.append(f"{label:<30}" + "".join(f"{cell(r):>16}" for r in runs))
    return "\n".join(lines)
