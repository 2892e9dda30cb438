"""The Tour's hybrid walk: the same four requests on a full-attention model's tree (Llama-3-8B) and
on a hybrid one's (Qwen3.5-4B, or gpt-oss-20b), in SGLang 0.5.23's component tree and vLLM
0.33's hybrid block cache, one scheduler phase a frame.

    R1 = S + A    S: a 1,600-token shared prefix; A, B, C: 600 tokens each of their own
    R2 = S + B    on Qwen3.5 FULL matches 1,600 but the split node there has no Mamba state
    R3 = S + C    (a tombstone): the hit is cut to 0, and R2 keeps a state at 1,600 for R3
    R4 = R1's first 1,900 tokens + 300 own: attention matches 1,900, no state there: cut to
                  the last checkpoint on the path

Each request goes through hybrid_lifecycle's functions as SGLang's scheduler calls them (match
with the Mamba copy on write, admit, prefill, finish: insert and unlock) and through vLLM's
KVCacheManager (lookup, prefill chunks cut by the Mamba split, free); one output token each.
Why snapshots per frame and not an event log with keyframes (radix/tree/unified_replay.py, the
Trace debugger's): 17 frames of trees of at most 6 nodes, a few KB in all. Leaves out: drawing
and words (viz/hybrid.py), batching (one request at a time), eviction (the pools hold it all).
"""

from __future__ import annotations

from typing import NamedTuple

from radix import events as ev
from radix.blocks.kv_cache_manager import HybridLookup, KVCacheManager
from radix.models.config import load_preset
from radix.models.sglang import sglang_shape
from radix.models.vllm import VllmLayout, vllm_layout
from radix.request import Req
from radix.tree.hybrid_args import HybridServerArgs, build_hybrid_cache
from radix.tree.hybrid_lifecycle import (
    admit,
    decode_step,
    extend,
    finish,
    match_kv_cache,
    prefill_done,
)
from radix.tree.unified_check import ComponentNodeState

BASELINE = "llama-3-8b"  # full attention only: the chapter's tree
# the Tour's walks (beside scenarios/tour.py's WALKS): its name -> the hybrid beside BASELINE
TOUR_WALKS = {"hybrid": "qwen3.5-4b", "hybrid-swa": "gpt-oss-20b"}
TOUR_TITLES = {"hybrid": "Tour: Llama-3-8B beside Qwen3.5-4B",
               "hybrid-swa": "Tour: Llama-3-8B beside gpt-oss-20b"}
HYBRIDS = tuple(TOUR_WALKS.values())
SHARED, OWN, BRANCH, TAIL = 1_600, 600, 1_900, 300
PHASES = ("match", "admit", "prefill", "finish")
POOL_TOKENS = 20_000  # SGLang's full (and SWA) pool: the walk never evicts
MAMBA_SLOTS = 32
OUTPUT = 2  # tokens each request generates: a prefill's checkpoint, then a decode step
VLLM_BLOCKS = 400  # vLLM's blocks, every group together: the walk never evicts


def walk_prompts() -> list[tuple[str, list[int]]]:
    """(rid, prompt) of R1..R4: 2,200 tokens each.

    >>> [(r, len(p)) for r, p in walk_prompts()]
    [('R1', 2200), ('R2', 2200), ('R3', 2200), ('R4', 2200)]
    """
    shared = list(range(1_000, 1_000 + SHARED))
    own = [list(range(100_000 * i, 100_000 * i + OWN)) for i in range(1, 4)]
    r1 = shared + own[0]
    tail = list(range(400_000, 400_000 + TAIL))
    return [("R1", r1), ("R2", shared + own[1]), ("R3", shared + own[2]),
            ("R4", r1[:BRANCH] + tail)]


class Side(NamedTuple):
    """One model in one frame."""

    nodes: tuple[ComponentNodeState, ...]  # the component tree after the phase
    events: tuple[ev.Event, ...]  # what the phase did to the tree (and the request's states)
    lookup: HybridLookup | None  # vLLM's lookup of the frame's request (None before it)


class WalkFrame(NamedTuple):
    request: int  # index into walk_prompts(); -1: the empty caches
    phase: str  # "start" or one of PHASES
    sides: tuple[Side, ...]  # per model, HybridWalk.models' order


class ModelInfo(NamedTuple):
    """What the pictures and words need of a model's two caches."""

    preset: str
    components: tuple[str, ...]  # SGLang's tree: "full", then "swa" / "mamba"
    window: int | None  # SGLang's sliding_window_size (the config's window - 1)
    checkpoint_grid: int | None  # SGLang's Mamba checkpoint grid
    block_size: int  # vLLM's attention block
    kinds: tuple[str, ...]  # vLLM's groups, in order: full_attention, sliding_window, mamba
    vllm_window: int | None  # vLLM's sliding window (the config's)


class HybridWalk(NamedTuple):
    models: tuple[ModelInfo, ...]  # the baseline, then the hybrid
    rids: tuple[str, ...]
    prompts: tuple[tuple[int, ...], ...]
    frames: tuple[WalkFrame, ...]
    hits: tuple[tuple[int, ...], ...]  # per model: SGLang's hit per request
    vllm_hits: tuple[tuple[int, ...], ...]  # per model: vLLM's agreed hit per request


class _Model:
    """One model's two caches, driven phase by phase."""

    def __init__(self, name: str) -> None:
        preset = load_preset(name)
        shape = sglang_shape(preset)
        self.sink = ev.ListSink()
        args = HybridServerArgs(max_total_num_tokens=POOL_TOKENS, swa_full_tokens_ratio=1.0,
                                max_mamba_cache_size=MAMBA_SLOTS if shape.has_mamba else None)
        self.cache, self.knobs = build_hybrid_cache(shape, args, sink=self.sink)
        self.layout: VllmLayout = vllm_layout(preset)
        self.manager: KVCacheManager = self.layout.manager(VLLM_BLOCKS)
        self.req: Req | None = None
        self.hit = None
        mamba = self.cache.components.get(2)
        specs = [g.kv_cache_spec for g in self.layout.groups]
        windows = [s.sliding_window for s in specs if s.kind == "sliding_window"]
        self.info = ModelInfo(name, tuple(str(c) for c in self.cache.tree_components),
                              shape.sliding_window, mamba.checkpoint_grid if mamba else None,
                              self.layout.block_size, tuple(s.kind for s in specs),
                              windows[0] if windows else None)

    def run(self, phase: str, rid: str, prompt: list[int]) -> Side:
        self.sink.events.clear()
        cache, m = self.cache, self.manager
        if phase == "match":
            self.req = Req(rid, prompt, max_new_tokens=OUTPUT)
            match_kv_cache(cache, self.req)
            m.new_step_starts()
            self.hit = m.get_computed_blocks(self.req)
        elif phase == "admit":
            admit(cache, self.req, self.knobs)
        elif phase == "prefill":  # the first token comes with it: a checkpoint inserts
            extend(cache, self.req, len(prompt))
            prefill_done(cache, self.req, 0)
            self._vllm_prefill(len(prompt))
        else:  # the second token's decode step, then the release: insert and unlock
            decode_step(cache, [self.req], self.knobs, lambda _r: 0)
            finish(cache, self.req)
            self.req.output_ids.append(0)  # vLLM's view of the same two tokens
            m.allocate_slots(self.req, 1)
            m.free(self.req)
        return Side(cache.snapshot(), tuple(self.sink.events), m.lookups[-1])

    def _vllm_prefill(self, n: int) -> None:
        """Chunks cut by the scheduler's Mamba split (at the junction, on block boundaries),
        as vLLM's scheduler runs them, one step each."""
        m, req, hit = self.manager, self.req, self.hit
        state, first = m.request(req), True
        while state.num_computed_tokens < n:
            local = hit.num_computed_tokens if first else 0
            done = state.num_computed_tokens + local
            chunk = m.mamba_block_aligned_split(req, n - done, local)
            if m.allocate_slots(req, chunk, hit if first else None) is None:
                raise RuntimeError("the walk's vLLM pool is too small")
            first = False
            m.new_step_starts()


def run_walk(hybrid: str = HYBRIDS[0]) -> HybridWalk:
    """The walk on BASELINE and `hybrid`: an empty frame, then one per phase per request.

    Qwen3.5-4B: SGLang hits 0, 0, 1,600, 1,600 (Llama-3-8B: 0, 1,600, 1,600, 1,900);
    vLLM at block 576 hits 0, 0, 1,152 (the junction R2 pinned), then 1,728 (R1's own state).
    """
    if hybrid not in HYBRIDS:
        raise ValueError(f"hybrid: {hybrid!r} is not one of {', '.join(HYBRIDS)}")
    models = [_Model(BASELINE), _Model(hybrid)]
    prompts = walk_prompts()
    empty = tuple(Side(m.cache.snapshot(), (), None) for m in models)
    frames = [WalkFrame(-1, "start", empty)]
    hits: list[list[int]] = [[] for _ in models]
    for i, (rid, prompt) in enumerate(prompts):
        for phase in PHASES:
            sides = tuple(m.run(phase, rid, prompt) for m in models)
            frames.append(WalkFrame(i, phase, sides))
            if phase == "match":
                for k, m in enumerate(models):
                    hits[k].append(m.req.cache_protected_len)
    return HybridWalk(tuple(m.info for m in models), tuple(r for r, _ in prompts),
                      tuple(tuple(p) for _, p in prompts), tuple(frames),
                      tuple(tuple(h) for h in hits),
                      tuple(tuple(x.hit_tokens for x in m.manager.lookups) for m in models))
