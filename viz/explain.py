"""The hit-rate explainer drawn: buckets side by side, the what-if curves, the tables.

Reads a `radix.runs.explain.Explanation` (duck-typed: totals, prompt_tokens, what_if,
top_prefixes, top_losers). Every number carries its unit (tokens with separators, rates in
percent); uploaded text (request ids, namespaces) is escaped for plotly (viz/escape.py); tables
go to st.dataframe, which shows text as text. Leaves out: running the explainer
(scenarios/explain.py) and the page's links to the debugger's steps.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from radix.traces.hashview import block_span
from viz.escape import esc_html

SIDES = {"tree": "radix tree (SGLang)", "blocks": "block cache (vLLM)"}
# bucket -> (label, colour, what it means)
BUCKETS: dict[str, tuple[str, str, str]] = {
    "hit": ("hit", "#54a24b", "reused from the cache: not prefilled"),
    "evicted": ("evicted (capacity)", "#e45756", "an earlier request had it, but it was "
                "evicted before this request came: a capacity miss"),
    "last_token_cap": ("last-token cap", "#f58518", "input_len - 1: a fully cached prompt "
                       "still computes its last token (vLLM: its last block)"),
    "block_rounding": ("block rounding", "#eeca3b", "block cache: the partial block past the "
                       "last shared whole block has no hash"),
    "block_floor": ("block floor", "#ff9da6", "block cache: shared, but shorter than one block "
                    "(vLLM logs queries > 0, hits = 0)"),
    "in_flight": ("in flight", "#b279a2", "an earlier request with this prefix had not "
                  "finished its prefill when this one was admitted"),
    "other_namespace": ("other namespace", "#9d755d", "cached, but under another extra_key / "
                        "cache_salt / LoRA"),
    "first_seen": ("first seen (compulsory)", "#bab0ac", "no earlier request had this prefix"),
    "rejected": ("rejected (too big)", "#4c4c4c", "the pool could never hold the request"),
}
FONT = {"size": 13}


def pct(part: int, whole: int) -> str:
    """'1,234 tokens (12.3%)'; pct(5, 0) == '5 tokens'."""
    return f"{part:,} tokens ({part / whole:.1%})" if whole else f"{part:,} tokens"


def bucket_rows(e: Any) -> dict[str, list[str]]:
    """The buckets as table columns, tokens and share of the prompt tokens, plus a total row
    that equals the prompt tokens (each side's buckets add up to them)."""
    rows: dict[str, list[str]] = {"bucket": [], **{SIDES[s]: [] for s in e.totals},
                                  "what it means": []}
    for b, (label, _, means) in BUCKETS.items():
        rows["bucket"].append(label)
        for s in e.totals:
            rows[SIDES[s]].append(pct(e.totals[s][b], e.prompt_tokens))
        rows["what it means"].append(means)
    rows["bucket"].append("all prompt tokens")
    for s in e.totals:
        rows[SIDES[s]].append(f"{sum(e.totals[s].values()):,} tokens")
    rows["what it means"].append("every prompt token is in exactly one bucket per cache")
    return rows


def bucket_figure(e: Any) -> go.Figure:
    """Stacked horizontal bars, one per cache, one segment per bucket (empty ones left out).
    A segment says its share when that is 1% or more, and only where the words fit at 12 px:
    plotly hides them otherwise (`uniformtext`; it squeezed a thin segment's "0%" to 0.8 px).
    """
    fig = go.Figure()
    sides = list(e.totals)
    for b, (label, colour, means) in BUCKETS.items():
        xs = [e.totals[s][b] for s in sides]
        if not any(xs):
            continue
        fig.add_bar(y=[SIDES[s] for s in sides], x=xs, name=label, orientation="h",
                    marker_color=colour,
                    text=[f"{x / e.prompt_tokens:.0%}" if x >= 0.005 * e.prompt_tokens else ""
                          for x in xs],
                    textposition="inside", customdata=[pct(x, e.prompt_tokens) for x in xs],
                    hovertemplate=f"{label}: %{{customdata}}<br>{esc_html(means)}"
                                  "<extra></extra>")
    fig.update_layout(barmode="stack", height=230, margin={"l": 10, "r": 10, "t": 40, "b": 30},
                      title=f"Where the {e.prompt_tokens:,} prompt tokens went",
                      xaxis_title="prompt tokens", legend={"orientation": "h", "y": -0.35},
                      font=FONT, uniformtext={"minsize": 12, "mode": "hide"})
    fig.update_yaxes(autorange="reversed")
    return fig


def capacity_figure(points: list[dict[str, Any]], working_set: int) -> go.Figure:
    """Hit rate against KV capacity for both caches (log x); unbounded as dashed lines."""
    bounded = sorted((p for p in points if p["capacity"] is not None),
                     key=lambda p: p["capacity"])
    free = next((p for p in points if p["capacity"] is None), None)
    fig = go.Figure()
    for key, name, colour in (("tree_hit_rate", SIDES["tree"], "#4c78a8"),
                              ("block_hit_rate", SIDES["blocks"], "#f58518")):
        fig.add_scatter(x=[p["capacity"] for p in bounded], y=[p[key] for p in bounded],
                        mode="lines+markers", name=name, line={"color": colour},
                        customdata=[f"{p['rejected']:,} rejected, {p['evicted_tokens']:,} "
                                    "tokens evicted (tree)" for p in bounded],
                        hovertemplate="%{x:,} tokens: %{y:.1%}<br>%{customdata}<extra></extra>")
        if free is not None:
            fig.add_hline(y=free[key], line={"color": colour, "dash": "dash", "width": 1},
                          annotation_text=f"unbounded {free[key]:.1%}",
                          annotation_font_color=colour)
    fig.update_layout(title=f"Hit rate against KV capacity (working set {working_set:,} tokens)",
                      # decades only: between them plotly's log axis writes the digits 2..9
                      # at 3/4 of the tick font, 9-10 px (a projector needs >= 12, #24)
                      xaxis={"type": "log", "title": "KV capacity (tokens)", "dtick": 1},
                      yaxis={"title": "hit rate", "tickformat": ".0%", "rangemode": "tozero"},
                      height=330, margin={"l": 10, "r": 10, "t": 40, "b": 30}, font=FONT,
                      legend={"orientation": "h", "y": -0.25})
    return fig


def _pair_bars(points: list[dict[str, Any]], labels: list[str], title: str,
               x_title: str) -> go.Figure:
    fig = go.Figure()
    for key, name, colour in (("tree_hit_rate", SIDES["tree"], "#4c78a8"),
                              ("block_hit_rate", SIDES["blocks"], "#f58518")):
        ys = [p[key] for p in points]
        fig.add_bar(x=labels, y=ys, name=name, marker_color=colour,
                    text=[f"{y:.1%}" for y in ys], textposition="outside",
                    hovertemplate="%{x}: %{y:.1%}<extra></extra>")
    fig.update_layout(barmode="group", title=title, height=300, font=FONT,
                      xaxis={"title": x_title, "type": "category"},
                      yaxis={"title": "hit rate", "tickformat": ".0%", "rangemode": "tozero"},
                      margin={"l": 10, "r": 10, "t": 40, "b": 30},
                      legend={"orientation": "h", "y": -0.3})
    return fig


def page_figure(points: list[dict[str, Any]]) -> go.Figure:
    """Hit rate at page/block sizes 1, 16, 64 (both caches the same size): bars "1 token",
    "16 tokens", "64 tokens"."""
    return _pair_bars(points, [f"{p['page_size']} token{'s' * (p['page_size'] != 1)}"
                               for p in points],
                      "Hit rate against page / block size", "page (tree) and block (vLLM) size")


def namespace_figure(points: list[dict[str, Any]]) -> go.Figure:
    """Hit rate with the trace's namespaces (extra_key, cache_salt) and without them."""
    return _pair_bars(points, ["with namespaces" if p["namespaces"] else "without"
                               for p in points],
                      "Namespaces on and off", "extra_key / cache_salt")


def prefix_rows(prefixes: list[Any], mooncake: bool = False) -> list[dict[str, str]]:
    """The prefixes that saved most: tokens saved, hits, where, first ids (Mooncake: hash ids,
    a token's id // 512), namespace."""
    rows = []
    for p in prefixes:
        ids = getattr(p, "hash_ids", None)  # the trace's own ids (not hash x 512)
        head = ids if mooncake and ids is not None else \
            [t // 512 for t in p.head[::512]] if mooncake else list(p.head)
        where = f"{p.start:,} .. {p.end:,}"
        rows.append({"tokens saved": f"{p.tokens_saved:,}", "hits": f"{p.requests:,}",
                     "tokens": f"{where} ({block_span(p.start, p.end)})" if mooncake else where,
                     ("first hash ids" if mooncake else "first token ids"): str(head),
                     "namespace": "-" if p.namespace is None else str(p.namespace)})
    return rows


def loser_rows(losers: list[Any], side: str) -> list[dict[str, str]]:
    """The requests that lost most: reusable tokens prefilled, and why. The eviction that cost
    each is timed in the explainer's own scheduled run (simulated seconds): its step numbers
    are not the debugger's, so none is shown (the page's buttons go to the debugger's)."""
    rows = []
    for r in losers:
        b = getattr(r, side)
        why = ", ".join(f"{BUCKETS[k][0]} {b[k]:,}" for k in BUCKETS
                        if b[k] and k not in ("hit", "first_seen", "rejected"))
        by = r.tree_evicted_by if side == "tree" else r.blocks_evicted_by
        rows.append({"request": r.rid, "prompt": f"{r.prompt_tokens:,} tokens",
                     "hit": f"{b['hit']:,} tokens", "lost": why,
                     "evicted by": "-" if by is None else
                     f"{by.policy.split(' (')[0]}, {by.time:,.1f} s into the simulated run"})
    return rows
