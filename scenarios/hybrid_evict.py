"""The Eviction lab's component question: SGLang 0.5.23's component tree (FULL + SWA + MAMBA) must
free full tokens, SWA tokens or Mamba states, and each component evicts its own way.

A small three-kind model (sliding window 8, Mamba checkpoint grid 4; SGLang runs FULL + SWA +
MAMBA for a model with both kinds of layers) serves, one after the other, chat A (a 32-token
system prompt S + 16), chat A2 (A's first 40 tokens + 8: it keeps a state at 40, inside A's
path), chat A's second turn (A + 8), chat B (S + 16: a state at 32), a RAG request (its own
40-token context + 8) and chat C (S + 24), still running unless asked: its lock holds S in
every component. SWA's LRU tail is then A's inner node at 32..40, which holds a state: an SWA
eviction tombstones it and cascades. Then one `evict` call:
    full    FULL pops evictable leaves in LRU order: a leaf goes whole, every component with it
    swa     SWA walks its LRU from the tail past locked entries: a leaf goes whole, an inner
            node is tombstoned (its FULL slots stay) and the cascade takes its Mamba state
    mamba   MAMBA walks its LRU: an inner node loses its state only (no cascade upward)
The frames: the tree before, then after each tombstone or deleted node, rebuilt from the
evict's events (radix/tree/unified_replay.py's model, one event at a time). Leaves out: the
drawing and words (viz/hybrid.py, viz/hybrid_evict.py), the pools' slot ids.
"""

from __future__ import annotations

from typing import NamedTuple

from radix import events as ev
from radix.request import Req
from radix.tree.hybrid_args import HybridServerArgs, HybridShape, build_hybrid_cache
from radix.tree.hybrid_lifecycle import admit, match_kv_cache, serve
from radix.tree.unified_check import ComponentNodeState
from radix.tree.unified_replay import ComponentEventLog

WINDOW, GRID = 8, 4  # SGLang's sliding_window_size and Mamba chunk for the lab's model
SYSTEM_LEN = 32
ASKS = {"swa": "SWA tokens", "mamba": "Mamba states", "full": "full tokens"}
DEFAULT_AMOUNT = {"swa": 16, "mamba": 1, "full": 16}
LIMIT = 200  # the most any ask may name (the tree holds about 100 tokens)
VISIBLE = (ev.ComponentTombstoned, ev.NodeEvicted)  # a frame each


def lab_requests() -> list[tuple[str, list[int], int]]:
    """(name, prompt, tokens to generate) in arrival order; chat C comes last."""
    system = list(range(1, SYSTEM_LEN + 1))

    def own(i: int, n: int) -> list[int]:
        return list(range(1_000 * i, 1_000 * i + n))

    a = system + own(1, 16)
    return [("chat A", a, 1), ("chat A2", a[:40] + own(5, 8), 1),
            ("chat A, turn 2", a + own(6, 8), 1), ("chat B", system + own(2, 16), 1),
            ("RAG", list(range(500, 540)) + own(3, 8), 1), ("chat C", system + own(4, 24), 4)]


class EvictFrame(NamedTuple):
    event: ev.Event | None  # None: the tree before the call
    nodes: tuple[ComponentNodeState, ...]  # the tree after the event


class LabRun(NamedTuple):
    ask: str  # a key of ASKS
    amount: int
    live: bool  # chat C still running (its lock held)
    components: tuple[str, ...]
    frames: tuple[EvictFrame, ...]
    freed: dict[str, int]  # what evict returned, per component (tokens; Mamba: states)
    sizes: tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]  # (evictable,
    #   protected) per component, before and after
    names: dict[int, str]  # node id -> the request that inserted it ("system prompt S": S)
    lru: dict[str, tuple[int, ...]]  # SWA's and Mamba's LRU before the call, tail first


def check_params(ask: str, amount: int) -> None:
    """Raises ValueError naming the field when a parameter is out of range."""
    if ask not in ASKS:
        raise ValueError(f"ask: {ask!r} is not one of {', '.join(ASKS)}")
    if not 1 <= amount <= LIMIT:
        raise ValueError(f"amount: {amount} is not in 1..{LIMIT}")


def run_lab(ask: str = "swa", amount: int | None = None, live: bool = True) -> LabRun:
    """Builds the state, then evicts `amount` of `ask` (default DEFAULT_AMOUNT[ask])."""
    amount = DEFAULT_AMOUNT[ask] if amount is None else amount
    check_params(ask, amount)
    log = ComponentEventLog(("swa", "mamba"), keyframe_every=1)
    shape = HybridShape(sliding_window=WINDOW, has_mamba=True, mamba_chunk_size=GRID)
    args = HybridServerArgs(max_total_num_tokens=400, swa_full_tokens_ratio=1.0,
                            max_mamba_cache_size=24, mamba_track_interval=GRID,
                            swa_eviction_interval=1)
    cache, knobs = build_hybrid_cache(shape, args, sink=log)
    for name, prompt, out in lab_requests():
        req = Req(name, prompt, max_new_tokens=out)
        if name == "chat C" and live:
            match_kv_cache(cache, req)
            admit(cache, req, knobs)
        else:
            serve(cache, req, knobs)
    sizes = [_sizes(cache)]
    lru = {str(c.component_type): tuple(cd.node.id for cd in reversed(c.lru.entries()))
           for c in cache.aux}
    step = log.num_steps
    result = cache.evict(**{{"full": "num_tokens", "swa": "swa_num_tokens",
                             "mamba": "mamba_num"}[ask]: amount})
    sizes.append(_sizes(cache))
    model = log.model_at(step)
    frames = [EvictFrame(None, model.snapshot())]
    for e in log.events_of(step):
        model.apply(e)
        if isinstance(e, VISIBLE):
            frames.append(EvictFrame(e, model.snapshot()))
    return LabRun(ask, amount, live, tuple(str(c) for c in cache.tree_components),
                  tuple(frames), {str(k): v for k, v in result.items()}, tuple(sizes),
                  _names(log), lru)


def _sizes(cache) -> dict[str, tuple[int, int]]:
    return {str(c): (cache.evictable_size_[c], cache.protected_size_[c])
            for c in cache.tree_components}


def _names(log: ComponentEventLog) -> dict[int, str]:
    """Node id -> the request whose step inserted it; a split's upper half keeps the name,
    and the node that ends at the system prompt is S."""
    names: dict[int, str] = {}
    for step in log.steps:
        rid = next((e.rid for e in step if isinstance(e, ev.StepStarted)), None)
        for e in step:
            if isinstance(e, ev.NodeInserted) and rid:
                names[e.node_id] = rid
            elif isinstance(e, ev.NodeSplit) and e.node_id in names:
                names[e.new_node_id] = names[e.node_id]
    model = log.model
    for nid, node in model.nodes.items():
        if nid and node.parent.id == 0 and len(node.key) == SYSTEM_LEN:
            names[nid] = "system prompt S"
    return names
