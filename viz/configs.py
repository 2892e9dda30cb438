"""DESIGN.md's four server configurations as a table and two plotly charts.

Reads scenarios.configs' runs (duck-typed): per configuration its totals (hit rate, tokens
prefilled, derived prefill seconds, tree and block evictions) and its per-request rows. Numbers
carry units and separators; equal curves (LPM + SLRU often equals the baseline) still show as
two lines, each configuration with its own colour and dash.
Leaves out: TTFT charts (`python -m radix configs` prints them).
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import plotly.graph_objects as go

from viz.escape import esc_html

LEGEND_PX = 13

COLUMNS = (  # (table column, totals key, format)
    ("hit rate", "hit_rate", "{:.1%}"),
    ("hit rate (blocks)", "block_hit_rate", "{:.1%}"),
    ("tokens prefilled", "prefilled_tokens", "{:,}"),
    ("prefill s (derived)", "prefill_seconds", "{:.3f}"),
    ("evicted tokens (tree)", "evicted_tokens", "{:,}"),
    ("block evictions", "block_evictions", "{:,}"),
    ("unreachable blocks", "unreachable_blocks", "{:,}"),
)


def config_table(runs: list[Any]) -> dict[str, list[str]]:
    """One row per configuration, formatted: the three-request walk's baseline row reads
    37.1%, 37.0%, 4,343, 0.197 (4,343 / 22,036 tok/s), 0, 0, 0."""
    table: dict[str, list[str]] = {"configuration": [r.label for r in runs]}
    for column, key, fmt in COLUMNS:
        table[column] = [fmt.format(r.totals[key]) if key in r.totals else "-" for r in runs]
    return table


def cumulative(rows: list[Any]) -> tuple[list[float], list[float], list[int]]:
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


def _figure(runs: list[Any], pick: int, title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    for run, (color, dash) in zip(runs, STYLES * len(runs)):
        series = cumulative(run.rows)
        fig.add_trace(go.Scatter(x=series[0], y=series[pick], mode="lines+markers",
                                 name=run.label, customdata=[esc_html(r.rid) for r in run.rows],
                                 hovertemplate="%{customdata}: %{y}<extra>" + run.label
                                 + "</extra>", line={"shape": "hv", "color": color,
                                                     "dash": dash, "width": 2}))
    fig.update_layout(title={"text": title, "font": {"size": 14}}, xaxis_title="arrival (s)",
                      yaxis_title=y_title, height=400,
                      margin={"l": 50, "r": 10, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.25, "yanchor": "top",
                              "font": {"size": LEGEND_PX}})
    return fig


def hit_rate_figure(runs: list[Any]) -> go.Figure:
    fig = _figure(runs, 1, "Hit rate so far (tree)", "hit rate")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return fig


def prefilled_figure(runs: list[Any]) -> go.Figure:
    return _figure(runs, 2, "Tokens prefilled so far", "tokens")
