"""Pictures of a routed cluster: where each request went and why, and the router's own view.

Reads scenarios/routing.py's plain data (`Routed` rows, the router view) and never runs a
router or a cache. `routing_figure`: one row per replica, one dot per request in arrival
order, coloured by the decision's reason, the chosen request ringed, the path from the router
drawn to its replica. `scores_rows`: the chosen request's per-replica scores and loads, for a
table. `approx_tree_dot`: cache-aware's / prefix-affinity's approximate tree as Graphviz DOT,
each block coloured by the replicas it was routed to (PALETTE, the Watch page's colours).
Leaves out: the replicas' own trees (viz/dot.py's `tree_dot` draws those).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import graphviz
import plotly.graph_objects as go

from viz.cluster import PALETTE

REASON_COLOURS = {"cache-hit": "#54a24b", "prefix-match": "#54a24b", "lowest-cost": "#54a24b",
                  "cache-miss": "#4c78a8", "smallest-tree": "#4c78a8", "imbalance": "#e45756",
                  "turn": "#9d755d", "random": "#9d755d", "least-load": "#72b7b2",
                  "power-of-two": "#72b7b2", "session": "#b279a2"}
SCORE_LABELS = {"cache-aware": "match ratio", "prefix-affinity": "match rate",
                "kv-overlap": "cost (lower wins)", "least-load": "tokens in flight",
                "power-of-two": "tokens in flight"}


def routing_figure(routed: Sequence[Any], current: int, num_replicas: int) -> go.Figure:
    """x = request (arrival order), y = replica; the current request ringed, with its path
    from the router (y = -1) drawn."""
    fig = go.Figure()
    for reason in dict.fromkeys(r.reason for r in routed):
        pts = [(i, r) for i, r in enumerate(routed) if r.reason == reason]
        fig.add_scatter(x=[i + 1 for i, _ in pts], y=[r.replica for _, r in pts], mode="markers",
                        name=reason, marker={"size": 14,
                                             "color": REASON_COLOURS.get(reason, "#888")},
                        text=[f"{r.rid}: {r.why}" for _, r in pts], hoverinfo="text")
    if 0 <= current < len(routed):
        r = routed[current]
        fig.add_scatter(x=[current + 1, current + 1], y=[-1, r.replica], mode="lines",
                        line={"color": "#333", "width": 2, "dash": "dot"}, showlegend=False,
                        hoverinfo="skip")
        fig.add_scatter(x=[current + 1], y=[r.replica], mode="markers", showlegend=False,
                        marker={"size": 24, "color": "rgba(0,0,0,0)",
                                "line": {"color": "#333", "width": 3}}, hoverinfo="skip")
    fig.update_layout(height=260, margin={"l": 10, "r": 10, "t": 10, "b": 30},
                      font={"size": 14}, legend={"orientation": "h", "y": -0.25})
    fig.update_yaxes(tickvals=[-1, *range(num_replicas)],
                     ticktext=["router", *(f"replica {k}" for k in range(num_replicas))],
                     range=[-1.5, num_replicas - 0.5], autorange="reversed")
    fig.update_xaxes(title_text="request (arrival order)", dtick=1)
    return fig


def scores_rows(row: Any, router: str) -> list[dict[str, Any]]:
    """One row per replica: the score the router compared, the requests in flight, chosen."""
    label = SCORE_LABELS.get(router, "score")
    fmt = "{:.0%}" if router in ("cache-aware", "prefix-affinity") else "{:g}"
    return [{"replica": k, label: fmt.format(s), "requests in flight": row.loads[k],
             "chosen": "yes" if k == row.replica else ""}
            for k, s in enumerate(row.scores)]


def approx_tree_dot(view: dict[str, Any], max_nodes: int = 60) -> str:
    """The router's approximate tree: one box per block (the first `max_nodes`), filled with
    the colour of the replica it was routed to (grey when several)."""
    g = graphviz.Digraph("approx", graph_attr={"rankdir": "TB", "bgcolor": "transparent",
                                               "nodesep": "0.15", "ranksep": "0.25"},
                         node_attr={"shape": "box", "style": "filled,rounded",
                                    "fontname": "DejaVu Sans", "fontsize": "12",
                                    "height": "0.25", "width": "0.3"})
    g.node("n0", label="router", fillcolor="#eeeeee")
    for node_id, parent, tenants in view["nodes"][:max_nodes]:
        fill = PALETTE[tenants[0] % len(PALETTE)] if len(tenants) == 1 else "#bbbbbb"
        g.node(f"n{node_id}", label=",".join(map(str, tenants)), fillcolor=fill,
               fontcolor="white" if len(tenants) == 1 else "black")
        g.edge(f"n{parent}", f"n{node_id}")
    return g.source
