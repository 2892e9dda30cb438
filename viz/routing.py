"""Pictures of a routed cluster: where each request went and why, and the router's own view.

Reads scenarios/routing.py's plain data (`Routed` rows, the router view) and never runs a
router or a cache. `routing_figure`: one row per replica, one dot per request in arrival
order, coloured by the decision's reason, the chosen request ringed, the path from the router
drawn to its replica. `scores_rows`: the chosen request's per-replica scores and loads, for a
table. `replica_tree_dot` and `approx_tree_dot`: a replica's radix tree and the router's
approximate tree as compact Graphviz DOT (token counts, not tokens), coloured by replica
(PALETTE, the Watch page's colours). Leaves out: token text (the Tour's tree view shows it).
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


def _graph(name: str, rankdir: str = "LR") -> graphviz.Digraph:
    return graphviz.Digraph(name, graph_attr={"rankdir": rankdir, "bgcolor": "transparent",
                                              "nodesep": "0.12", "ranksep": "0.2"},
                            node_attr={"shape": "box", "style": "filled,rounded",
                                       "fontname": "DejaVu Sans", "fontsize": "14",
                                       "height": "0.3", "margin": "0.06,0.02"},
                            edge_attr={"arrowsize": "0.5"})


def replica_tree_dot(snapshot: Any, replica: int) -> str:
    """A replica's radix tree, compact for a small multiple: one box per node labelled with its
    tokens (and its hit count), in the replica's colour; top down."""
    g = _graph(f"replica{replica}", "TB")
    fill = PALETTE[replica % len(PALETTE)]
    for node in snapshot.nodes:
        if node.parent is None:
            g.node(f"n{node.id}", label="root", fillcolor="#eeeeee")
            continue
        hits = f" h{node.hit_count}" if node.hit_count else ""
        g.node(f"n{node.id}", label=f"{len(node.token_ids)}{hits}", fillcolor=fill,
               fontcolor="white", tooltip=f"node #{node.id}: {len(node.token_ids)} tokens, "
                                          f"{node.hit_count} hits")
        g.edge(f"n{node.parent}", f"n{node.id}")
    return g.source


def approx_tree_dot(view: dict[str, Any]) -> str:
    """The router's approximate tree, chains of blocks sent to the same replicas merged into
    one box ("5 blk"), filled with that replica's colour (grey when several share it).

    >>> "3 blk" in approx_tree_dot({"nodes": [(1, 0, (0,)), (2, 1, (0,)), (3, 2, (0,))]})
    True
    """
    children: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    for node_id, parent, tenants in view["nodes"]:
        children.setdefault(parent, []).append((node_id, tenants))
    g = _graph("approx")
    g.node("n0", label="router", fillcolor="#eeeeee")
    stack = [(0, c) for c in children.get(0, [])]
    while stack:
        parent, (node_id, tenants) = stack.pop()
        count, last = 1, node_id
        while len(children.get(last, [])) == 1 and children[last][0][1] == tenants:
            last = children[last][0][0]
            count += 1
        one = len(tenants) == 1
        g.node(f"n{node_id}", label=f"{count} blk", fontcolor="white" if one else "black",
               fillcolor=PALETTE[tenants[0] % len(PALETTE)] if one else "#bbbbbb",
               tooltip=f"routed to replica(s) {', '.join(map(str, tenants))}")
        g.edge(f"n{parent}", f"n{node_id}")
        stack.extend((node_id, c) for c in children.get(last, []))
    return g.source
