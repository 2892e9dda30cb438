"""A trace on a hybrid model through both engines (hybrid.py's sides), one request at a time:
`run_side` (one engine's totals, each request's Outcome to a callback), `compare_model` (both,
`python -m radix compare --model`), `run_configs` (each engine configuration that changes the
answer, engines.engine_configs: `configs --model`, and explain's what-ifs).
Leaves out: batching (`simulate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from radix.models.engines import EngineAssumptions, describe, engine_configs
from radix.models.preset import ModelPreset
from radix.request import Req
from radix.runs import memory
from radix.runs.compare import fewer_collections
from radix.runs.hybrid import SIDES, Outcome, SGLangSide, Sizing, VllmSide, preflight
from radix.runs.progress import Progress
from radix.runs.workers import fork_map
from radix.traces.trace import Trace, is_compact_trace, output_tokens, to_req


def prompt_lens(trace: Trace) -> list[int]:
    """Each request's prompt in real tokens (the loader's input_lens; a trace made by hand may
    leave them out)."""
    if len(trace.input_lens) == len(trace.requests):
        return list(trace.input_lens)
    return [len(r.token_ids) * trace.token_scale for r in trace.requests]


def sizing_of(trace: Trace, outputs: Sequence[Sequence[int]]) -> Sizing:
    return Sizing([(n, len(o)) for n, o in zip(prompt_lens(trace), outputs)],
                  is_compact_trace(trace))


def run_side(engine: str, trace: Trace, preset: ModelPreset, a: EngineAssumptions, *,
             outputs: Sequence[Sequence[int]] | None = None, sink: Any = None,
             on_outcome: Callable[[Req, Outcome], None] | None = None,
             progress: Progress | None = None, budget: int | None = None) -> dict[str, Any]:
    """Every request of `trace` on one engine ("sglang" or "vllm"), in arrival order; returns
    its totals (compare.py's figures, and how much full attention alone would have hit).
    `on_outcome(req, outcome)` sees each request (its Req is dropped after: rows do not pile
    up in memory); `progress(fraction, text)` hears every 256th. Refused (MemoryError) before it
    runs when its pools would pass `budget` bytes (hybrid.preflight)."""
    if outputs is None:
        outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    sizing = sizing_of(trace, outputs)
    preflight(preset, a, sizing, budget)
    side = SIDES[engine](preset, a, sizing, sink)
    s = {"engine": engine, "requests": 0, "rejected": 0, "prompt_tokens": 0,
         "rejected_prompt_tokens": 0, "hit_tokens": 0, "prefilled_tokens": 0,
         "attention_hit_tokens": 0, "cut": {}, "junctions": 0,
         "uncached_common_prefix_tokens": 0}
    with fewer_collections():
        for tr, out in zip(trace.requests, outputs):
            done = s["requests"] + s["rejected"]
            if progress is not None and done % 256 == 0:
                progress(done / len(outputs), f"{engine}: request {done:,} of {len(outputs):,}")
            req = to_req(tr)
            o = side.serve(req, out)
            if on_outcome is not None:
                on_outcome(req, o)
            _count(s, o)
    hit, admitted = s["hit_tokens"], s["prompt_tokens"]
    every = admitted + s["rejected_prompt_tokens"]
    s["hit_rate"] = round(hit / admitted, 4) if admitted else 0.0
    s["hit_rate_all"] = round(hit / every, 4) if every else 0.0
    s["pools"] = side_pools(side)
    return s


def _count(s: dict[str, Any], o: Outcome) -> None:
    if o.rejected:
        s["rejected"] += 1
        s["rejected_prompt_tokens"] += o.prompt_tokens
        return
    s["requests"] += 1
    s["prompt_tokens"] += o.prompt_tokens
    s["hit_tokens"] += o.hit
    s["prefilled_tokens"] += o.prompt_tokens - o.hit
    s["attention_hit_tokens"] += o.attention_hit
    if o.cut_by is not None:
        s["cut"][o.cut_by] = s["cut"].get(o.cut_by, 0) + o.attention_hit - o.hit
    s["junctions"] += o.junction > o.hit and s["engine"] == "vllm"
    s["uncached_common_prefix_tokens"] += o.uncached_common


def side_pools(side: SGLangSide | VllmSide) -> dict[str, Any]:
    """The pools a side ran with, for the output."""
    if isinstance(side, VllmSide):
        return {"num_blocks": side.num_blocks, "block_size": side.layout.block_size,
                "groups": [g.kv_cache_spec.kind for g in side.layout.groups]}
    return {"full_tokens": side.full_tokens, "swa_tokens": side.swa_tokens,
            "mamba_slots": side.mamba_slots, "page_size": side.a.page_size,
            "mamba_radix_cache_strategy": side.args.mamba_radix_cache_strategy
            if side.shape.has_mamba else None}


def compare_model(trace: Trace, preset: ModelPreset, a: EngineAssumptions | None = None,
                  per_request: bool = False, progress: Progress | None = None,
                  budget: int | None = None) -> dict[str, Any]:
    """Both engines over `trace` on `preset`: {"model", "assumptions", "sglang": totals,
    "vllm": totals}, and with `per_request` each engine's hit per request ("requests").

    The issue's Qwen3.5 workload, 3 requests of 1,600 shared + 600 own tokens: vLLM (block
    576) hits 0, 0, then 1,152 (the junction request 2 pinned); SGLang (extra_buffer) 0, 0,
    then 1,600 (the state request 2 kept at its branching seqlen).
    >>> from radix.models import load_preset
    >>> from radix.traces import TraceRequest
    >>> t = Trace("request", [TraceRequest(f"r{i}", i, tuple(range(1600)) + tuple(
    ...     range(10**6 * (i + 1), 10**6 * (i + 1) + 600)), 1) for i in range(3)])
    >>> out = compare_model(t, load_preset("qwen3.5-4b"), per_request=True)
    >>> out["vllm"]["requests_hit"], out["sglang"]["requests_hit"]
    ([0, 0, 1152], [0, 0, 1600])
    """
    a = a or EngineAssumptions()
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    result: dict[str, Any] = {"model": preset.name, "assumptions": describe(preset, a)}
    for engine in SIDES:
        rows: list[Outcome] = []
        keep = (lambda _req, o, rows=rows: rows.append(o)) if per_request else None
        result[engine] = run_side(engine, trace, preset, a, outputs=outputs, on_outcome=keep,
                                  progress=progress, budget=budget)
        if per_request:
            result[engine]["requests_hit"] = [o.hit for o in rows]
            result[engine]["per_request"] = [o._asdict() for o in rows]
    return result


_FORKED: tuple[Trace, ModelPreset, list[tuple[str, str, EngineAssumptions]], Any] | None = None


def run_configs(trace: Trace, preset: ModelPreset, a: EngineAssumptions | None = None,
                jobs: int = 1, progress: Progress | None = None, budget: int | None = None
                ) -> list[tuple[str, dict[str, Any]]]:
    """(label, totals) of each engine configuration of engines.engine_configs, in order; jobs
    > 1: in up to that many forked workers, as many as `budget` bytes hold (memory.py's
    plan_workers; each run is single-threaded Python; `progress` is called in the worker
    that runs)."""
    global _FORKED
    configs = engine_configs(preset, a or EngineAssumptions())
    budget = memory.DEFAULT_BUDGET_MB << 20 if budget is None else budget
    sizing = sizing_of(trace, [output_tokens(trace, i) for i in range(len(trace.requests))])
    per_run = max(preflight(preset, b, sizing, budget) for _, _, b in configs)
    jobs = memory.plan_workers(per_run, jobs, budget).workers
    _FORKED = (trace, preset, configs, progress)
    try:
        results = fork_map(_run_forked, len(configs), jobs)
    finally:
        _FORKED = None
    return [(label, totals) for (label, _, _), totals in zip(configs, results, strict=True)]


def _run_forked(i: int) -> dict[str, Any]:
    trace, preset, configs, progress = _FORKED
    label, engine, a = configs[i]
    said = None if progress is None else (lambda f, text: progress(f, f"{label}: {text}"))
    return run_side(engine, trace, preset, a, progress=said)
