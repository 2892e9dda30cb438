"""The Trace debugger's hybrid run: a trace on a model preset through both engines' hybrid caches,
one request at a time, kept for scrubbing request by request.

It runs the commands' own code (radix.runs.hybrid_compare `run_side`, the `--model` runs of
compare/explain/why, with radix.models.engines's assumptions): SGLang 0.5.23's component tree
into a compact event log with keyframes (radix/tree/unified_replay.py: the tree at any request's
match or end is replayed, not stored), vLLM 0.33's hybrid KVCacheManager keeping only each
request's lookup (its groups' own hits, the agreed hit, the junction). Why an event log here and
snapshots in the Tour's walk: a trace's tree has hundreds of nodes after thousands of steps, a
snapshot per step would be quadratic. Its memory is held in the session's budget
(runtime/budget.py) like the replay's. Leaves out: the pictures and words (viz/hybrid*.py,
viz/group_grid.py), batching (requests run alone, as `compare --model` runs them).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from radix import events as ev
from radix.blocks.kv_cache_manager import HybridLookedUp
from radix.models import load_preset
from radix.models.engines import EngineAssumptions, describe, for_sglang, for_vllm
from radix.runs.hybrid import Outcome, Sizing, estimate_bytes
from radix.runs.hybrid_compare import run_side, sizing_of
from radix.traces.trace import Trace, output_tokens
from radix.tree.unified_replay import ComponentTreeModel
from scenarios.trace import EVENT_BYTES, Cancelled, CompactLog, Ledger, compact, nbytes

WHAT = "trace hybrid run"  # the budget's name for it
OUTCOME_BYTES = 400  # an Outcome and a lookup record per request, per engine


class ModelInfo(NamedTuple):
    """What the pictures and words need of the model's caches (scenarios/hybrid_tour.py's)."""

    preset: str
    components: tuple[str, ...]  # SGLang's tree: "full", then "swa" / "mamba"
    window: int | None  # SGLang's sliding_window_size
    checkpoint_grid: int | None  # unused here: the words read the events
    block_size: int  # vLLM's attention block
    kinds: tuple[str, ...]  # vLLM's groups' kinds, in group order
    vllm_window: int | None  # vLLM's sliding window (the config's)


class CompactComponentLog(CompactLog):
    """scenarios/trace.py's CompactLog over a component tree: SWA values kept compact too."""

    def __init__(self, components: tuple[str, ...], keyframe_every: int = 64,
                 page_size: int = 1) -> None:
        super().__init__(keyframe_every, page_size)
        self.model = ComponentTreeModel(components, page_size)
        self._keyframes = [self.model.copy()]

    def emit(self, event: ev.Event) -> None:
        if type(event) is ev.ComponentStored and len(event.slot_ids) > 1:
            e = event
            full = None if e.full_slot_ids is None else compact(e.full_slot_ids)
            event = ev.ComponentStored(e.node_id, e.component, compact(e.slot_ids), e.recovered,
                                       full)
            self.payload += nbytes(event.slot_ids) + (0 if full is None else nbytes(full))
        super().emit(event)


class Lookups:
    """vLLM's sink: keeps each lookup record, drops the block events."""

    def __init__(self) -> None:
        self.records: list[HybridLookedUp] = []

    def emit(self, event: ev.Event) -> None:
        if type(event) is HybridLookedUp:
            self.records.append(event)


class HybridTrace(NamedTuple):
    model: ModelInfo
    assumptions: dict[str, list[str]]  # engines.describe: what each engine was assumed to run
    totals: dict[str, dict[str, Any]]  # "sglang", "vllm": run_side's figures
    log: CompactLog  # SGLang's tree, step by step
    starts: list[int]  # per request: the log step its match is (the tree before it)
    ends: list[int]  # per request: steps done after it
    sglang: list[Outcome]
    vllm: list[Outcome]
    lookups: dict[str, HybridLookedUp]  # vLLM's lookup of each request run, by rid
    nbytes: int  # what it holds (estimate)


def model_info(preset_name: str, a: EngineAssumptions) -> ModelInfo:
    preset = load_preset(preset_name)
    shape, _ = for_sglang(preset, a)
    layout = for_vllm(preset, a)
    specs = [g.kv_cache_spec for g in layout.groups]
    windows = [s.sliding_window for s in specs if s.kind == "sliding_window"]
    comps = ("full",) + (("swa",) if shape.sliding_window else ()) + (
        ("mamba",) if shape.has_mamba else ())
    return ModelInfo(preset.name, comps, shape.sliding_window, None, layout.block_size,
                     tuple(s.kind for s in specs), windows[0] if windows else None)


def run_hybrid(trace: Trace, preset_name: str, a: EngineAssumptions | None = None, *,
               session_id: str = "-", budget: Ledger | None = None, progress: Any = None,
               cancel: threading.Event | None = None) -> HybridTrace:
    """Both engines over `trace` on the preset; the budget holds what the pools and the log
    take (BudgetError when they would not fit); `cancel` stops it between requests."""
    a = a or EngineAssumptions()
    preset = load_preset(preset_name)
    info = model_info(preset_name, a)
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    sizing: Sizing = sizing_of(trace, outputs)
    pools = estimate_bytes(preset, a, sizing)[0]  # while the engines run
    rows_bytes = 2 * OUTCOME_BYTES * len(trace.requests)

    def hold(log_bytes: int, running: bool = True) -> None:
        if budget is not None:
            budget.reserve(session_id, WHAT, rows_bytes + log_bytes + running * pools)

    hold(0)
    big = len(trace.requests) > 2_000
    log = CompactComponentLog(info.components[1:], 256 if big else 64, a.page_size)
    rows: dict[str, list] = {"sglang": [], "vllm": []}
    starts, ends = [], []

    def seen(engine: str, o: Outcome) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        rows[engine].append(o)
        if engine == "sglang":
            starts.append(ends[-1] if ends else 0)
            ends.append(log.num_steps)
            if len(ends) % 256 == 0:
                hold(log.nbytes)

    def said(engine: str):
        if progress is None:
            return None
        half = 0.0 if engine == "sglang" else 0.5
        return lambda f, text: progress(half + f / 2, text)

    lookups = Lookups()
    totals = {}
    for engine, sink in (("sglang", log), ("vllm", lookups)):
        totals[engine] = run_side(engine, trace, preset, a, outputs=outputs, sink=sink,
                                  on_outcome=lambda _r, o, e=engine: seen(e, o),
                                  progress=said(engine))
    nbytes = rows_bytes + log.nbytes + EVENT_BYTES * len(lookups.records)
    hold(nbytes - rows_bytes, running=False)
    return HybridTrace(info, describe(preset, a), totals, log, starts, ends, rows["sglang"],
                       rows["vllm"], {r.rid: r for r in lookups.records}, nbytes)


def request_at(h: HybridTrace, i: int, after: bool = False) -> tuple[tuple, list[ev.Event]]:
    """The tree at request i's match (after its match step: the match's split made) or after
    the request (`after`), and the request's match events."""
    start = h.starts[i]
    step = h.ends[i] if after else min(start + 1, h.ends[i])
    match = h.log.events_of(start) if start < h.log.num_steps and start < h.ends[i] else []
    return h.log.snapshot_at(step), list(match)
