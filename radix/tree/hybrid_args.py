"""A hybrid model's tree configured the way SGLang 0.5.23 is: its server arguments by their names
(arg_groups/fields/schedule.py, exec_.py; the environment variables the scheduler reads), the
strategy's resolution (arg_groups/overrides.py `_mamba_radix_cache_resolution`, mamba_hook.py),
and the pool sizes they imply (model_executor/pool_configurator.py for the full and SWA pools,
kv_cache_configurator.py for the Mamba state slots), from a model's shape in bytes.

Leaves out: speculative decoding's extra states, DP/TP sharding, the unified (shared-byte)
pools, the int8 checkpoint pool, ReplaySSM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from radix.request import SlotAllocator
from radix.tree.hybrid_lifecycle import SchedulerKnobs
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator
from radix.tree.unified_radix_cache import UnifiedRadixCache

STRATEGIES = ("auto", "extra_buffer", "no_buffer")


@dataclass(frozen=True)
class HybridShape:
    """What the tree needs to know of a model (a preset derived from its config.json)."""

    sliding_window: int | None = None  # SWA layers' window; None: no SWA layers
    has_mamba: bool = False  # linear-attention / SSM layers (a recurrent state per request)
    full_kv_bytes_per_token: int = 131_072  # all full-attention layers together
    swa_kv_bytes_per_token: int = 0  # all SWA layers together
    mamba_state_bytes: int = 0  # one request's recurrent state, all Mamba layers
    mamba_chunk_size: int = 64  # config mamba_chunk_size (GDN: FLA's chunk, 64)


@dataclass(frozen=True)
class HybridServerArgs:
    """SGLang's flags (and env vars) by their names, with its defaults."""

    page_size: int = 1
    radix_eviction_policy: str = "lru"
    mamba_radix_cache_strategy: str = "auto"  # auto, extra_buffer, no_buffer
    disable_overlap_schedule: bool = False  # no_buffer needs it on (auto turns it on)
    mamba_track_interval: int = 256  # decode keeps a state every lcm(grid, this) tokens
    mamba_max_states_per_path: int = -1  # -1: no cap on states along one path
    swa_full_tokens_ratio: float = 0.8  # SWA pool tokens / full pool tokens
    max_mamba_cache_size: int | None = None  # state slots; None: from the memory ratio
    mamba_full_memory_ratio: float = 0.9  # Mamba state memory / full KV memory
    max_total_num_tokens: int | None = None  # full pool tokens; None: from the memory budget
    swa_eviction_interval: int = 128  # SGLANG_SWA_EVICTION_INTERVAL
    release_prefill_swa: bool = False  # SGLANG_OPT_RELEASE_PREFILL_SWA

    def __post_init__(self) -> None:
        if self.mamba_radix_cache_strategy not in STRATEGIES:
            raise ValueError(f"mamba_radix_cache_strategy must be one of {STRATEGIES}, got "
                             f"{self.mamba_radix_cache_strategy!r}")
        if not 0 < self.swa_full_tokens_ratio <= 1:
            raise ValueError("swa_full_tokens_ratio must be in (0, 1], got "
                             f"{self.swa_full_tokens_ratio!r}")
        if self.mamba_max_states_per_path == 0 or self.mamba_max_states_per_path < -1:
            raise ValueError("mamba_max_states_per_path must be -1 (unlimited) or a positive "
                             f"integer, got {self.mamba_max_states_per_path}")

    def resolved(self, shape: HybridShape) -> HybridServerArgs:
        """The strategy SGLang resolves: auto picks extra_buffer when the overlap scheduler is
        on or pages are larger than 1, else no_buffer and turns the overlap scheduler off;
        no_buffer requires page 1 and no overlap.

        >>> HybridServerArgs().resolved(HybridShape(has_mamba=True)).mamba_radix_cache_strategy
        'extra_buffer'
        >>> a = HybridServerArgs(disable_overlap_schedule=True)
        >>> a = a.resolved(HybridShape(has_mamba=True)); a.mamba_radix_cache_strategy
        'no_buffer'
        """
        if not shape.has_mamba:
            return self
        args, s = self, self.mamba_radix_cache_strategy
        if s == "auto":
            extra = not self.disable_overlap_schedule or self.page_size > 1
            args = replace(self, mamba_radix_cache_strategy="extra_buffer" if extra
                           else "no_buffer", disable_overlap_schedule=not extra or
                           self.disable_overlap_schedule)
        if args.mamba_radix_cache_strategy == "no_buffer":
            if args.page_size != 1:
                raise ValueError("mamba_radix_cache_strategy no_buffer only supports page_size 1")
            if not args.disable_overlap_schedule:
                raise ValueError("mamba_radix_cache_strategy no_buffer does not support the "
                                 "overlap scheduler: set disable_overlap_schedule")
        elif args.mamba_track_interval % args.page_size:
            raise ValueError("mamba_track_interval must be a multiple of page_size")
        return args


class PoolSizes(NamedTuple):
    full_tokens: int  # full pool (SGLang's max_total_num_tokens)
    swa_tokens: int  # SWA pool (0 without SWA layers)
    mamba_slots: int  # max_mamba_cache_size (0 without Mamba layers)


def pool_sizes(shape: HybridShape, args: HybridServerArgs, memory_bytes: int | None) -> PoolSizes:
    """SGLang's split of a KV memory budget: the Mamba states take
    mamba_full_memory_ratio / (1 + ratio) of it (one padding slot aside), unless
    max_mamba_cache_size is set; the rest buys full tokens at full + ratio * SWA bytes each
    (an SWA token per `swa_full_tokens_ratio` full tokens), page-aligned.

    8 GiB, 128 KiB per full token, no SWA, 1 MiB states, ratio 0.9: the states get
    8,192 * 0.9 / 1.9 = 3,880 MiB, 3,879 slots and the padding one; the other 4,312 MiB buy
    4,312 * 8 = 34,496 full tokens.
    >>> shape = HybridShape(has_mamba=True, mamba_state_bytes=2**20)
    >>> pool_sizes(shape, HybridServerArgs(), 8 << 30)
    PoolSizes(full_tokens=34496, swa_tokens=0, mamba_slots=3879)
    """
    ps, rest, slots = args.page_size, memory_bytes, 0
    if shape.has_mamba:
        per = shape.mamba_state_bytes
        if args.max_mamba_cache_size is not None:
            slots = args.max_mamba_cache_size
        elif rest is None or per <= 0:
            raise ValueError("set max_mamba_cache_size, or give a memory budget and the state's "
                             "bytes (mamba_state_bytes)")
        else:
            r = args.mamba_full_memory_ratio
            slots = int((rest * r / (1 + r) - per) // per)
        if rest is not None:
            rest -= (slots + 1) * per
    if args.max_total_num_tokens is not None:
        full = args.max_total_num_tokens
    elif rest is None:
        raise ValueError("set max_total_num_tokens or give a memory budget")
    else:
        ratio = args.swa_full_tokens_ratio if shape.sliding_window else 0
        full = int(rest // (shape.full_kv_bytes_per_token + ratio * shape.swa_kv_bytes_per_token))
    full -= full % ps
    swa = int(full * args.swa_full_tokens_ratio) // ps * ps if shape.sliding_window else 0
    if full <= 0 or (shape.has_mamba and slots <= 0):
        raise ValueError(f"the budget leaves no room: {full} full tokens, {slots} state slots")
    return PoolSizes(full, swa, slots)


def build_hybrid_cache(shape: HybridShape, args: HybridServerArgs | None = None,
                       memory_bytes: int | None = None, sink=None, runs: bool = False) -> \
        tuple[UnifiedRadixCache, SchedulerKnobs]:
    """The tree (components from the shape) over pools sized as SGLang sizes them, and the
    scheduler's knobs for it. `runs`: full slots handed out as runs (SlotAllocator(runs=True))
    when there is no SWA pool, so that a compact (Mooncake) trace stays compact.

    >>> shape = HybridShape(sliding_window=128, swa_kv_bytes_per_token=2**16)
    >>> cache, knobs = build_hybrid_cache(shape, HybridServerArgs(max_total_num_tokens=10_000))
    >>> cache.tree_components, cache.allocator.swa.size, knobs.swa_eviction_interval
    ((<ComponentType.FULL: 0>, <ComponentType.SWA: 1>), 8000, 128)
    """
    args = (args or HybridServerArgs()).resolved(shape)
    sizes = pool_sizes(shape, args, memory_bytes)
    ps = args.page_size
    comps = ["full"] + (["swa"] if shape.sliding_window else []) + (
        ["mamba"] if shape.has_mamba else [])
    alloc = (SWASlotAllocator(sizes.full_tokens, sizes.swa_tokens, ps) if shape.sliding_window
             else SlotAllocator(sizes.full_tokens, page_size=ps, runs=runs))
    cache = UnifiedRadixCache(
        comps, page_size=ps, eviction_policy=args.radix_eviction_policy,
        sliding_window_size=shape.sliding_window, mamba_chunk_size=shape.mamba_chunk_size,
        mamba_max_states_per_path=args.mamba_max_states_per_path,
        enable_mamba_extra_buffer=args.mamba_radix_cache_strategy == "extra_buffer",
        allocator=alloc, mamba_pool=MambaSlotPool(sizes.mamba_slots) if shape.has_mamba
        else None, sink=sink)
    knobs = SchedulerKnobs(
        mamba_track_interval=args.mamba_track_interval,
        enable_overlap_schedule=not args.disable_overlap_schedule,
        swa_eviction_interval=args.swa_eviction_interval,
        release_prefill_swa=args.release_prefill_swa)
    return cache, knobs
