"""One request at a time on a hybrid model's caches, both engines: SGLang 0.5.23's component tree
(`SGLangSide`: hybrid_lifecycle.py's match, admit, chunked prefill, token-by-token decode,
finish) and vLLM 0.33's hybrid KVCacheManager (`VllmSide`: lookup with the junction, chunks cut
by the Mamba split, decode in steps ending on block boundaries, which allocate as token by token
but free a block the window passed at the step's end). Each request gives an `Outcome`; pools
come from one KV memory budget, or hold the trace (unbounded), within the memory budget
(`preflight`). A whole trace: hybrid_compare.py. Leaves out: batching, context limits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from radix.models.engines import (
    EngineAssumptions,
    sglang_pools,
    sglang_server_args,
    vllm_num_blocks,
    vllm_options,
)
from radix.models.preset import ModelPreset
from radix.models.sglang import sglang_shape
from radix.models.vllm import vllm_layout
from radix.request import Req
from radix.runs import memory
from radix.tree.components.base import ComponentType
from radix.tree.hybrid_args import build_hybrid_cache
from radix.tree.hybrid_lifecycle import (
    admit,
    decode_step,
    extend,
    finish,
    match_kv_cache,
    prefill_done,
    retract,
)

MAMBA, SWA, FULL = "mamba", "sliding_window", "full_attention"  # vLLM's spec kinds
BYTES_PER_BLOCK = 200  # a vLLM block here: the object, its queue links, its hash key
BYTES_PER_SWA_SLOT = 48  # an SWA-pool slot here: the mapping entry and the ids it holds


class Outcome(NamedTuple):
    """One request on one engine. Hits: attention_hit >= cut_at >= hit; the tokens between
    attention_hit and cut_at were cut by `cut_by` (a group or component kind), those between
    cut_at and hit by the intersection of the groups."""

    rid: str
    prompt_tokens: int
    hit: int  # the hit every group / component agreed on
    rejected: bool  # too big for the pools (counted, not run)
    attention_hit: int  # full attention alone (vLLM's full group; SGLang's FULL walk)
    cut_at: int  # the lowest single group's hit (SGLang: the hit)
    cut_by: str | None  # the kind that held the hit below attention_hit (None: nothing)
    unit: int  # the hybrid block (vLLM) or the page (SGLang) hits are counted in
    uncached_common: int  # vLLM's num_uncached_common_prefix_tokens (SGLang: 0)
    junction: int  # vLLM's shared_prefix_boundary; SGLang's mamba_branching_seqlen; 0: none
    grid: int = 0  # where Mamba states are kept: vLLM's block, SGLang's checkpoint grid
    keeps_branch: bool = True  # SGLang: the request keeps a state at the junction (extra_buffer)


class Sizing(NamedTuple):
    """What the pools are sized from when unbounded: each request's prompt and output lengths,
    and whether the prompts are compact (Mooncake: slot ids as runs)."""

    lengths: list[tuple[int, int]]  # (prompt tokens, output tokens) per request
    compact: bool

    def room(self, unit: int) -> int:
        """Tokens for every prompt and output and a unit each: nothing is evicted.

        >>> Sizing([(10, 2), (5, 1)], False).room(4)
        27
        """
        return sum(n + o + unit for n, o in self.lengths) + 1


class SGLangSide:
    """SGLang's component tree for `preset` under `a` (see the module docstring)."""

    engine = "sglang"

    def __init__(self, preset: ModelPreset, a: EngineAssumptions, sizing: Sizing,
                 sink: Any = None) -> None:
        self.shape = shape = sglang_shape(preset)
        self.a = a
        self.args = args = sglang_args(preset, a, sizing)
        self.cache, self.knobs = build_hybrid_cache(shape, args, sink=sink, runs=sizing.compact)
        alloc = self.cache.allocator
        self.full_tokens = args.max_total_num_tokens
        self.swa_tokens = alloc.swa.size if shape.sliding_window else None
        self.mamba_slots = self.cache.mamba_pool.size if shape.has_mamba else None
        kinds = [k for k, on in ((SWA, shape.sliding_window), (MAMBA, shape.has_mamba)) if on]
        self.cut_kind = kinds[0] if len(kinds) == 1 else None
        mamba = self.cache.components[ComponentType.MAMBA] if shape.has_mamba else None
        self.grid = mamba.checkpoint_grid if mamba is not None else 0
        self.extra_buffer = args.mamba_radix_cache_strategy == "extra_buffer"

    def fits(self, n: int, out: int) -> bool:
        """Whether a request can run alone: its prompt and output in the full pool; its SWA
        share (a chunk and a window, or all of it) in the SWA pool; three Mamba slots."""
        ps = self.a.page_size
        if n + out + ps > self.full_tokens:
            return False
        if self.swa_tokens is not None:
            live = min(n + out, self.a.chunked_prefill_size + self.shape.sliding_window
                       + self.knobs.swa_eviction_interval) + 2 * ps
            if live > self.swa_tokens:
                return False
        return self.mamba_slots is None or self.mamba_slots >= 3

    def serve(self, req: Req, out: Sequence[int]) -> Outcome:
        n = len(req.origin_input_ids)
        if not self.fits(n, len(out)):
            return Outcome(req.rid, n, 0, True, 0, 0, None, self.a.page_size, 0, 0)
        cache, knobs = self.cache, self.knobs
        tokens: Iterator[int] = iter(out)
        m = match_kv_cache(cache, req)
        try:
            admit(cache, req, knobs)
            end, chunk = len(req.slot_ids), self.a.chunked_prefill_size
            while end < n:
                end += min(chunk, n - end)
                extend(cache, req, end)
            if not prefill_done(cache, req, next(tokens)):
                while not req.finished:
                    decode_step(cache, [req], knobs, lambda _r: next(tokens))
                finish(cache, req)
        except RuntimeError:  # a pool ran short mid-request: given up, as an abort
            retract(cache, req)
            return Outcome(req.rid, n, 0, True, 0, 0, None, self.a.page_size, 0, 0)
        full, hit = m.full_kv_hit_length, m.prefix_len
        cut_by = (self.cut_kind or "intersection") if full > hit else None
        return Outcome(req.rid, n, hit, False, full, hit if self.cut_kind else full, cut_by,
                       self.a.page_size, 0, m.mamba_branching_seqlen or 0, self.grid,
                       self.extra_buffer)


class VllmSide:
    """vLLM's hybrid KVCacheManager for `preset` under `a` (see the module docstring)."""

    engine = "vllm"

    def __init__(self, preset: ModelPreset, a: EngineAssumptions, sizing: Sizing,
                 sink: Any = None) -> None:
        self.a = a
        self.layout = layout = vllm_layout(preset, vllm_options(a))
        num_blocks = vllm_blocks(preset, a, sizing)
        self.num_blocks = num_blocks
        self.manager = layout.manager(num_blocks, max_in_flight_tokens=a.chunked_prefill_size,
                                      sink=sink)
        self.kinds = [g.kv_cache_spec.kind for g in layout.groups]
        self.unit = layout.hash_block_size

    def serve(self, req: Req, out: Sequence[int]) -> Outcome:
        m, n, bs = self.manager, len(req.origin_input_ids), self.layout.block_size
        m.new_step_starts()
        hit = m.get_computed_blocks(req)
        look = m.lookups.pop()
        state, first = m.requests[req.rid], True
        while state.num_computed_tokens < n:
            local = hit.num_computed_tokens if first else 0
            done = state.num_computed_tokens + local
            chunk = m.mamba_block_aligned_split(req, min(n - done, self.a.chunked_prefill_size),
                                                local, self.a.chunked_prefill_size)
            if m.allocate_slots(req, chunk, hit if first else None, first) is None:
                m.free(req)
                return Outcome(req.rid, n, 0, True, 0, 0, None, self.unit, 0, 0)
            first = False
            m.new_step_starts()
        req.output_ids.extend(out[:1])
        k = 1
        while k < len(out):  # decode: steps that end on block boundaries
            step = min(len(out) - k, bs - state.num_computed_tokens % bs)
            req.output_ids.extend(out[k:k + step])
            if m.allocate_slots(req, step) is None:
                break  # the pool is short: the request stops here (alone, it cannot wait)
            k += step
        m.free(req)
        return self._outcome(req.rid, n, look)

    def _outcome(self, rid: str, n: int, look: Any) -> Outcome:
        hits, kinds = look.group_hits, self.kinds
        full = [h for h, k in zip(hits, kinds) if k == FULL]
        attention = max(full) if full else max(hits)
        low = min(range(len(hits)), key=lambda i: (hits[i], kinds[i] == FULL))
        cut_by = None
        if attention > look.hit_tokens:
            cut_by = kinds[low] if hits[low] < attention else "intersection"
        return Outcome(rid, n, look.hit_tokens, False, attention, hits[low], cut_by, self.unit,
                       look.num_uncached_common_prefix_tokens, look.shared_prefix_boundary,
                       self.layout.mamba_block_size or 0)


def sglang_args(preset: ModelPreset, a: EngineAssumptions, sizing: Sizing) -> Any:
    """SGLang's server arguments with its pools: from the KV memory, or room for the trace."""
    if a.kv_memory_bytes is None:
        room = sizing.room(a.page_size)
        room += -room % a.page_size
        return sglang_server_args(preset, a, max_total_num_tokens=room, swa_full_tokens_ratio=1.0,
                                  max_mamba_cache_size=4 * len(sizing.lengths) + 8)
    sizes = sglang_pools(preset, a, a.kv_memory_bytes)
    return sglang_server_args(preset, a, max_total_num_tokens=sizes.full_tokens,
                              max_mamba_cache_size=sizes.mamba_slots or None)


def vllm_blocks(preset: ModelPreset, a: EngineAssumptions, sizing: Sizing) -> int:
    """vLLM's block count: from the KV memory, or (unbounded) a fresh block for every block
    the trace allocates, in every group, so that nothing is evicted."""
    layout = vllm_layout(preset, vllm_options(a))
    if a.kv_memory_bytes is not None:
        return vllm_num_blocks(layout, a.kv_memory_bytes)
    bs = layout.block_size
    return sum(-(-(n + o) // bs) + 2 for n, o in sizing.lengths) * len(layout.groups) + 1


def estimate_bytes(preset: ModelPreset, a: EngineAssumptions, sizing: Sizing
                   ) -> tuple[int, str]:
    """What one engine's run may hold beyond the trace, and which pool: vLLM's preallocated
    blocks, or SGLang's SWA pool (slot lists, not runs) when it holds a compact trace or the
    whole trace; the larger. Either engine runs alone in its process.

    >>> from radix.models import load_preset
    >>> estimate_bytes(load_preset("llama-3-8b"), EngineAssumptions(), Sizing([], False))
    (4096000, "vLLM's 20,480 blocks of 16 tokens")
    """
    num_blocks = vllm_blocks(preset, a, sizing)
    bs = vllm_layout(preset, vllm_options(a)).block_size
    out = [(num_blocks * BYTES_PER_BLOCK, f"vLLM's {num_blocks:,} blocks of {bs} tokens")]
    if preset.sliding_window and (sizing.compact or a.kv_memory_bytes is None):
        full = sglang_args(preset, a, sizing).max_total_num_tokens
        out.append((full * BYTES_PER_SWA_SLOT, f"SGLang's SWA pool of {full:,} tokens"))
    return max(out)


def preflight(preset: ModelPreset, a: EngineAssumptions, sizing: Sizing,
              budget: int | None = None) -> int:
    """The bytes a run may hold (estimate_bytes); MemoryError with the figures, before anything
    runs, when that and a process pass `budget` (default: the command line's, radix/runs/
    memory.py: RADIXLENS_PROCESS_MB)."""
    budget = memory.DEFAULT_BUDGET_MB << 20 if budget is None else budget
    est, what = estimate_bytes(preset, a, sizing)
    process = memory.PROCESS_BYTES
    if est + process > budget:
        raise MemoryError(f"{what} would take about {est >> 20:,} MiB (and {process >> 20} MiB "
                          f"a process); the memory budget is {budget >> 20:,} MiB: give a "
                          "smaller --kv-memory, or a bigger budget (explain --memory, "
                          "RADIXLENS_PROCESS_MB)")
    return est

SIDES = {"sglang": SGLangSide, "vllm": VllmSide}
