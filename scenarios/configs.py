"""DESIGN.md's four server configurations on one workload, through the simulated engine.

Runs `radix.runs.sim.simulate` once per entry of `radix.runs.sim.CONFIGS` (FCFS + LRU + page 1,
the baseline; LPM + SLRU; page size 16; cache disabled), every other setting equal, with vLLM's
block cache beside the tree. Hit rate and tokens prefilled come from the simulated scheduler and
radix tree; prefill seconds are derived (Llama-3-8B on H100, radix/runs/costs.py).
Leaves out: the table and charts (viz/configs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from examples import workloads
from radix.runs.sim import CONFIGS, RequestRow, SimConfig, simulate
from radix.traces import Trace, TraceRequest, load_trace

MOONCAKE = Path(__file__).resolve().parent.parent / "examples" / "traces" / "mooncake_excerpt.jsonl"
LABELS = {  # CONFIGS name -> what the page calls it
    "fcfs+lru+page1": "FCFS + LRU + page 1 (baseline)",
    "lpm+slru": "LPM + SLRU",
    "page16": "page size 16",
    "no-cache": "cache disabled",
}
SCENARIOS: dict[str, Callable[[], list[TraceRequest]]] = {  # label -> seeded generator
    "three-request walk (3)": workloads.three_requests,
    "cold burst (64 x 2,000-token prefix)": workloads.cold_burst,
    "multi-turn chat (5 turns)": workloads.multi_turn,
    "customer support (20 users)": workloads.customer_support,
    "RAG (200 requests)": workloads.rag,
    "eviction question (40 live)": lambda: workloads.eviction_question(num_live=40),
}
Progress = Callable[[float, str], None]  # (fraction done, what runs now)


class ConfigRun(NamedTuple):
    name: str  # CONFIGS name
    label: str  # LABELS[name]
    totals: dict[str, Any]  # simulate's totals
    rows: list[RequestRow]  # per request, in arrival order


def scenario_trace(label: str) -> Trace:
    """A scenario of examples.workloads as a request trace ("Mooncake excerpt" loads the file)."""
    if label == "Mooncake excerpt":
        return load_trace(MOONCAKE)
    reqs = SCENARIOS[label]()
    return Trace("request", reqs, input_lens=[len(r.token_ids) for r in reqs])


def workload_trace(what: tuple[str, ...], data: bytes = b"") -> Trace:
    """The Configurations page's workload: `what` is ("scenario", a SCENARIOS label),
    ("mooncake",) for the excerpt, or ("upload", its digest) with the uploaded bytes `data`
    (TraceError names the line and field)."""
    if what[0] == "scenario":
        return scenario_trace(what[1])
    if what[0] == "mooncake":
        return scenario_trace("Mooncake excerpt")
    if what[0] == "upload":
        return load_trace(data)
    raise ValueError(f"unknown workload {what[0]!r}")


def run_configs(trace: Trace, capacity: int | None = None, max_prefill_tokens: int = 16_384,
                progress: Progress | None = None) -> list[ConfigRun]:
    """The four configurations over `trace`; `capacity` in tokens (None: room for everything).
    `progress(fraction, text)` is called before each configuration and at the end."""
    if trace.format not in ("request", "mooncake"):
        raise ValueError(f"needs a request or Mooncake trace, got a {trace.format} trace")
    runs = []
    for i, (name, overrides) in enumerate(CONFIGS):
        if progress is not None:
            progress(i / len(CONFIGS), f"simulating {LABELS.get(name, name)}")
        cfg = SimConfig(capacity=capacity, max_prefill_tokens=max_prefill_tokens, **overrides)
        result = simulate(trace, cfg)
        runs.append(ConfigRun(name, LABELS.get(name, name), result.totals, result.rows))
    if progress is not None:
        progress(1.0, "done")
    return runs
