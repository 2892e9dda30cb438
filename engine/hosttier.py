"""The host tier in the engine (`--host-ratio R`): SGLang 0.5.23's HiCache over the real KV pool.

The tree is radix/hosttier's `HostTierCache` over the device pool's slots (the same code that
`python -m radix simulate --host-ratio` replays); this file only moves the rows its events
name. `HostKVPool` is the host pool: K/V rows for R x the device pool's tokens (whole pages
plus one, `host_token_capacity`) in CPU memory, pinned when the device pool is on CUDA, as
SGLang's `HostKVCache` (mem_cache/pool_host/). `TierCopier` hears the cache's events: a
`KVBackedUp` copies the node's device rows to its new host slots (write-through: at insert;
write-back: just before the demotion that frees them), a `KVLoadedBack` copies the host rows
of the loaded nodes into their freshly allocated device slots. `HostTierScheduler` runs each
request as `replay_host_tier` does, through `admit_request` (match prompt[:-1], load the host
hit back, lock, allocate, evicting the shortfall: demotions copy nothing more, the rows were
backed up) and `finish_request` (insert prompt + output[:-1], the tokens with KV, then the
prompt alone with priority + 1, splitting it off the output as 0.5.23's finish does; unlock),
with the model's prefill of the suffix and its decode steps between them.

Deliberate differences from SGLang: requests run one at a time in arrival order (no batching,
no chunked prefill, no retraction), as `replay_host_tier` runs them, so the engine's split agrees
with the model's token for token; a request's decode slots (max_new_tokens - 1) are allocated
with its prompt's at admission, as the replay allocates its recorded reply; transfers are
synchronous (SGLang overlaps load-back with the forward layer by layer and acks on a later step).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine.kv_pool import KVPool
from radix import events as ev
from radix.hosttier.cache import HostTierCache
from radix.hosttier.capacity import host_token_capacity
from radix.hosttier.replay import load_back_units
from radix.hosttier.requests import Admission, admit_request, finish_request
from radix.request import Req
from radix.sched.scheduler import StepReport, check_fits


class HostKVPool:
    """K/V rows of `size` host tokens per layer, beside a device `KVPool` (host slot = row).

    Bytes: size x the device pool's bytes per token (SmolLM2 fp32: 46,080 B a token).
    """

    def __init__(self, device_pool: KVPool, size: int) -> None:
        if size < 0:
            raise ValueError(f"host pool size must be >= 0 tokens, got {size}")
        self.device_pool, self.size = device_pool, size
        self.pinned = device_pool.device.type == "cuda" and torch.cuda.is_available()
        shape = (size, device_pool.num_kv_heads, device_pool.head_dim)
        try:
            self.k_buffer = [torch.empty(shape, dtype=device_pool.dtype, pin_memory=self.pinned)
                             for _ in range(device_pool.num_layers)]
            self.v_buffer = [torch.empty(shape, dtype=device_pool.dtype, pin_memory=self.pinned)
                             for _ in range(device_pool.num_layers)]
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            raise MemoryError(f"a host KV pool of {size:,} tokens "
                              f"({self.total_bytes / 2**30:,.1f} GiB) does not fit in host "
                              f"memory: pass a smaller --host-ratio") from exc

    @property
    def total_bytes(self) -> int:
        return self.size * self.device_pool.bytes_per_token

    def backup(self, device_slots: Sequence[int], host_slots: Sequence[int]) -> None:
        """Device rows -> host rows, every layer (SGLang's cache_controller.write)."""
        pool = self.device_pool
        src = torch.tensor(list(device_slots), dtype=torch.long, device=pool.device)
        dst = torch.tensor(list(host_slots), dtype=torch.long)
        for layer in range(pool.num_layers):
            self.k_buffer[layer][dst] = pool.k_buffer[layer].index_select(0, src).cpu()
            self.v_buffer[layer][dst] = pool.v_buffer[layer].index_select(0, src).cpu()

    def load(self, host_slots: Sequence[int], device_slots: Sequence[int]) -> None:
        """Host rows -> device rows, every layer (SGLang's cache_controller.load)."""
        pool = self.device_pool
        src = torch.tensor(list(host_slots), dtype=torch.long)
        dst = torch.tensor(list(device_slots), dtype=torch.long, device=pool.device)
        for layer in range(pool.num_layers):
            pool.k_buffer[layer][dst] = self.k_buffer[layer].index_select(0, src).to(
                pool.device, non_blocking=self.pinned)
            pool.v_buffer[layer][dst] = self.v_buffer[layer].index_select(0, src).to(
                pool.device, non_blocking=self.pinned)
        if self.pinned:
            torch.cuda.synchronize(pool.device)


class TierCopier:
    """An event sink for `HostTierCache`: moves the rows behind KVBackedUp and KVLoadedBack,
    times them, then passes every event on to `forward`. `cache` is set once it is built."""

    def __init__(self, host_pool: HostKVPool | None, forward: ev.EventSink | None = None
                 ) -> None:
        self.host_pool, self.forward = host_pool, forward
        self.cache: HostTierCache | None = None
        self.backup_s = self.load_s = 0.0  # seconds spent copying, each way

    def emit(self, event: ev.Event) -> None:
        if self.host_pool is not None and isinstance(event, ev.KVBackedUp | ev.KVLoadedBack):
            start = time.perf_counter()
            if isinstance(event, ev.KVBackedUp):
                self.host_pool.backup(self.cache.node(event.node_id).value, event.host_slot_ids)
                self.backup_s += time.perf_counter() - start
            else:
                host = [s for i in event.node_ids for s in self.cache.node(i).host_value]
                self.host_pool.load(host, event.slot_ids)
                self.load_s += time.perf_counter() - start
        if self.forward is not None:
            self.forward.emit(event)


class HostTierScheduler:
    """Stands in for radix's `Scheduler` in `EngineService` when the host tier is on: one
    request at a time, FCFS; a prefill step (admission, load back, the suffix's prefill), then
    one decode step per output token, then the insert. `add_request`, `step`, `has_work`,
    `finished` as the Scheduler's; metrics add device_hit_tokens, host_hit_tokens and
    load_back_s (matched_tokens is their sum, prefilled_tokens the miss)."""

    def __init__(self, runner: Any, cache: HostTierCache, copier: TierCopier, *,
                 clock: Callable[[], float] = time.monotonic, shadow: Any = None) -> None:
        self.runner, self.tree_cache, self.copier = runner, cache, copier
        self.allocator = cache.allocator
        self.clock, self.shadow = clock, shadow
        self.waiting: deque[Req] = deque()
        self.current: Req | None = None
        self._adm: Admission | None = None
        self._reserved: list[int] = []  # the current request's decode slots, in order
        self.finished: list[Req] = []
        self.notices: list[str] = []
        self.num_retracted = 0
        # rid -> output tokens to emit in place of the sampled ones (teacher forcing), set by
        # EngineService.submit(forced_output=...): `engine run --as-simulate` forces a trace's
        # recorded replies, so the tokens cached are the ones `simulate` caches
        self.forced: dict[str, list[int]] = {}

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.current)

    @property
    def evicted_tokens(self) -> int:
        c = self.tree_cache.counts()
        return c.demoted + c.dropped_unbacked + c.dropped_host_pressure

    def add_request(self, req: Req) -> None:
        check_fits(req, self.allocator.size, self.tree_cache.page_size)
        req.metrics.setdefault("arrival", req.arrival)
        req.metrics.setdefault("prompt_tokens", len(req.origin_input_ids))
        self.waiting.append(req)

    def step(self) -> StepReport:
        if self.current is not None:
            return self._decode()
        if self.waiting:
            return self._prefill(self.waiting.popleft())
        return StepReport("idle", [], [], [], 0.0, self.clock(), [], [], 0)

    def _prefill(self, req: Req) -> StepReport:
        evicted, load_s = self.evicted_tokens, self.copier.load_s
        prompt = req.origin_input_ids
        kv_tokens = len(prompt) + req.max_new_tokens - 1  # the last output token has no KV
        adm = admit_request(self.tree_cache, prompt, kv_tokens, req.priority,
                            (req.extra_key, req.cache_salt))
        if adm is None:  # check_fits and one request at a time make this unreachable
            raise RuntimeError(f"request {req.rid}: {kv_tokens:,} KV tokens do not fit the "
                               f"device pool of {self.allocator.size:,}")
        self.current, self._adm = req, adm
        extend = len(prompt) - len(adm.prefix)
        self._reserved = list(adm.fresh[extend:])
        req.prefix_indices = list(adm.prefix)
        req.fill_ids = list(prompt)
        req.slot_ids = adm.prefix + adm.fresh[:extend]
        m, served = req.metrics, adm.served
        m["matched_tokens"] = served.device_hit + served.host_hit
        m["device_hit_tokens"], m["host_hit_tokens"] = served.device_hit, served.host_hit
        m["prefilled_tokens"] = extend
        m["load_back_s"] = self.copier.load_s - load_s
        if self.shadow is not None:
            self.shadow.on_prefill(req, extend)
        out = self.runner.extend([req], [len(adm.prefix)])
        now = self.clock()
        req.output_ids.append(self._next_token(req, out.next_token_ids[0]))
        m.setdefault("ttft", now - m["arrival"])
        finished = [req.rid] if self._finish_if_done(req, now) else []
        return StepReport("prefill", [req.rid], [extend], [len(adm.prefix)],
                          out.seconds + m["load_back_s"], now, finished, [],
                          self.evicted_tokens - evicted)

    def _decode(self) -> StepReport:
        req = self.current
        req.slot_ids.append(self._reserved.pop(0))
        if self.shadow is not None:
            self.shadow.on_decode(req)
        out = self.runner.decode([req])
        now = self.clock()
        req.output_ids.append(self._next_token(req, out.next_token_ids[0]))
        req.metrics["decode_tokens"] = req.metrics.get("decode_tokens", 0) + 1
        finished = [req.rid] if self._finish_if_done(req, now) else []
        return StepReport("decode", [req.rid], [1], [0], out.seconds, now, finished, [], 0)

    def _next_token(self, req: Req, sampled: int) -> int:
        """The sampled token, or the forced one while the request has any left (its KV is
        then computed from the forced token by the next decode step, as teacher forcing)."""
        forced = self.forced.get(req.rid)
        if forced is not None and len(req.output_ids) < len(forced):
            return forced[len(req.output_ids)]
        return sampled

    def _finish_if_done(self, req: Req, now: float) -> bool:
        if not req.finished:
            return False
        finish_request(self.tree_cache, self._adm, req.all_ids[:len(req.slot_ids)])
        req.metrics["finish_time"] = now
        self.finished.append(req)
        if self.shadow is not None:
            self.shadow.on_release(req)
        self.current, self._adm, self._reserved = None, None, []
        self.forced.pop(req.rid, None)
        return True

    def clear(self) -> None:
        """Empties both tiers (reset_prefix_cache): every device node demoted or dropped, then
        every host node evicted. Only while idle (nothing locked)."""
        cache = self.tree_cache
        cache.evict(cache.allocator.size)
        cache.evict_host(cache.host.capacity)


def build_host_tier(pool: Any, runner: Any, host_ratio: float, *,
                    write_policy: str = "write_through", eviction: str = "lru",
                    sink: ev.EventSink | None = None, clock: Callable[[], float] = time.monotonic,
                    shadow: Any = None) -> HostTierScheduler:
    """The cache, host pool and scheduler for a device pool of `pool.size` tokens (page 1, as
    `simulate --host-ratio` runs): host tokens as --hicache-ratio R sizes them. A pool without
    rows (the simulated backend's allocator) gets the cache and no host rows."""
    host_tokens = host_token_capacity(pool.size, host_ratio)
    rows = HostKVPool(pool, host_tokens) if isinstance(pool, KVPool) else None
    copier = TierCopier(rows, sink)
    cache = HostTierCache(pool, host_tokens, write_policy, eviction_policy=eviction,
                          sink=copier, load_back_threshold=load_back_units(1))
    copier.cache = cache
    return HostTierScheduler(runner, cache, copier, clock=clock, shadow=shadow)
