"""DESIGN.md's four server configurations on one workload: a table and two plotly charts.

Runs `radix.runs.sim.simulate` once per entry of `radix.cli.simulate.CONFIGS` (FCFS + LRU + page 1,
the baseline; LPM + SLRU; page size 16; cache disabled), every other setting equal. Hit rate
and tokens prefilled come from the simulated scheduler and radix tree; prefill seconds are
derived (Llama-3-8B on H100, engine/costs.py); evictions and unreachable blocks also count vLLM's
block cache run beside it. Leaves out: TTFT charts (`python -m radix configs` prints them).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate
from pathlib import Path
from typing import Any, NamedTuple

import plotly.graph_objects as go

from examples import workloads
from radix.runs.sim import CONFIGS, RequestRow, SimConfig, simulate
from radix.traces import Trace, TraceRequest, load_trace

MOONCAKE = Path(__file__).resolve().parent.parent / "examples" / "traces" / "mooncake_excerpt.jsonl"
LABELS = {  # cmd_simulate.CONFIGS name -> what the page calls it
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


class ConfigRun(NamedTuple):
    name: str  # cmd_simulate.CONFIGS name
    label: str  # LABELS[name]
    totals: dict[str, Any]  # simulate's totals
    rows: list[RequestRow]  # per request, in arrival order


def scenario_trace(label: str) -> Trace:
    """A scenario of examples.workloads as a request trace ("mooncake excerpt" loads the file)."""
    if label == "Mooncake excerpt":
        return load_trace(MOONCAKE)
    reqs = SCENARIOS[label]()
    return Trace("request", reqs, input_lens=[len(r.token_ids) for r in reqs])


def run_configs(trace: Trace, capacity: int | None = None,
                max_prefill_tokens: int = 16_384) -> list[ConfigRun]:
    """The four configurations over `trace`; `capacity` in tokens (None: room for everything)."""
    runs = []
    for name, overrides in CONFIGS:
        cfg = SimConfig(capacity=capacity, max_prefill_tokens=max_prefill_tokens, **overrides)
        result = simulate(trace, cfg)
        runs.append(ConfigRun(name, LABELS.get(name, name), result.totals, result.rows))
    return runs


COLUMNS = (  # (table column, totals key, format)
    ("hit rate", "hit_rate", "{:.1%}"),
    ("hit rate (blocks)", "block_hit_rate", "{:.1%}"),
    ("tokens prefilled", "prefilled_tokens", "{:,}"),
    ("prefill s (derived)", "prefill_seconds", "{:.3f}"),
    ("evicted tokens (tree)", "evicted_tokens", "{:,}"),
    ("block evictions", "block_evictions", "{:,}"),
    ("unreachable blocks", "unreachable_blocks", "{:,}"),
)


def config_table(runs: list[ConfigRun]) -> dict[str, list[str]]:
    """One row per configuration, formatted: the three-request walk's baseline row reads
    37.1%, 37.0%, 4,343, 0.197 (4,343 / 22,036 tok/s), 0, 0, 0."""
    table: dict[str, list[str]] = {"configuration": [r.label for r in runs]}
    for column, key, fmt in COLUMNS:
        table[column] = [fmt.format(r.totals[key]) if key in r.totals else "-" for r in runs]
    return table


def cumulative(rows: list[RequestRow]) -> tuple[list[float], list[float], list[int]]:
    """Per request in arrival order: arrival (s), hit rate so far, tokens prefilled so far.

    The walk's baseline: matched 0, 2,055, 512 of 2,151, 2,135, 2,624 -> hit rate 0,
    2,055 / 4,286 = 47.9%, 2,567 / 6,910 = 37.1%; prefilled 2,151, 2,231, 4,343.
    """
    matched = list(accumulate(r.matched_tokens for r in rows))
    inputs = list(accumulate(r.input_tokens for r in rows))
    prefilled = list(accumulate(r.prefilled_tokens for r in rows))
    rates = [m / i if i else 0.0 for m, i in zip(matched, inputs)]
    return [r.arrival for r in rows], rates, prefilled


# One look per configuration, so that equal curves (LPM + SLRU often equals the baseline)
# still show as two lines: (colour, dash).
STYLES = (("#4c78a8", "solid"), ("#f58518", "dash"), ("#54a24b", "dot"), ("#e45756", "dashdot"))


def _figure(runs: list[ConfigRun], pick: int, title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    for run, (color, dash) in zip(runs, STYLES * len(runs)):
        series = cumulative(run.rows)
        fig.add_trace(go.Scatter(x=series[0], y=series[pick], mode="lines+markers",
                                 name=run.label, customdata=[r.rid for r in run.rows],
                                 hovertemplate="%{customdata}: %{y}<extra>" + run.label
                                 + "</extra>", line={"shape": "hv", "color": color,
                                                     "dash": dash, "width": 2}))
    fig.update_layout(title={"text": title, "font": {"size": 14}}, xaxis_title="arrival (s)",
                      yaxis_title=y_title, height=400,
                      margin={"l": 50, "r": 10, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.25, "yanchor": "top"})
    return fig


def hit_rate_figure(runs: list[ConfigRun]) -> go.Figure:
    fig = _figure(runs, 1, "Hit rate so far (tree)", "hit rate")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return fig


def prefilled_figure(runs: list[ConfigRun]) -> go.Figure:
    return _figure(runs, 2, "Tokens prefilled so far", "tokens")
