"""Pictures of a routed cluster: where each request went and why, and the router's own view.

Reads scenarios/routing.py's plain data (`Routed` rows, the router view) and never runs a
router or a cache. `routing_figure`: one row per replica, one dot per request in arrival
order, coloured by the decision's reason, the chosen request ringed, the path from the router
drawn to its replica. `scores_rows`: the chosen request's per-replica scores and loads, for a
table. `replica_tree_dot` and `approx_tree_dot`: a replica's radix tree and the router's
approximate tree as compact Graphviz DOT (token counts, not tokens), coloured by replica
(PALETTE, the Watch page's colours); a request's path (viz.scene's `match_path`) drawn with
thick black borders, the replica that received it on a pale yellow ground. `arrow_line`:
"router -> replica r" with every replica's score and load. Leaves out: token text (the Tour's
tree view shows it); animation between steps (Graphviz redraws).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import graphviz
import plotly.graph_objects as go

from viz.cluster import PALETTE
from viz.escape import esc_md
from viz.scene import match_path

CHOSEN_GROUND = "#fff4c2"  # the receiving replica's chart background

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


def _score_format(row: Any, router: str) -> tuple[str, str]:
    """The scores' label and format; an imbalance fallback's scores are the loads it compared."""
    if row.reason == "imbalance":
        return "requests in flight (fallback)", "{:g}"
    fmt = "{:.0%}" if router in ("cache-aware", "prefix-affinity") else "{:g}"
    return SCORE_LABELS.get(router, "score"), fmt


def scores_rows(row: Any, router: str) -> list[dict[str, Any]]:
    """One row per replica: the score the router compared, the requests in flight, chosen."""
    label, fmt = _score_format(row, router)
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


def replica_tree_dot(snapshot: Any, replica: int, prompt: Sequence[int] = (),
                     chosen: bool = False) -> str:
    """A replica's radix tree, compact for a small multiple: one box per node labelled with its
    tokens (and its hit count), in the replica's colour; top down. The nodes `prompt` walks
    (`match_path`) get a thick black border; `chosen` tints the ground (it received the
    request). Node names are `n<node id>`, stable across snapshots of the same tree."""
    g = _graph(f"replica{replica}", "TB")
    if chosen:
        g.graph_attr["bgcolor"] = CHOSEN_GROUND
    fill = PALETTE[replica % len(PALETTE)]
    path = set(match_path(snapshot, prompt)) if prompt else set()
    for node in snapshot.nodes:
        if node.parent is None:
            g.node(f"n{node.id}", label="root", fillcolor="#eeeeee")
            continue
        hits = f" h{node.hit_count}" if node.hit_count else ""
        mark = {"color": "black", "penwidth": "3"} if node.id in path else {}
        g.node(f"n{node.id}", label=f"{len(node.token_ids)}{hits}", fillcolor=fill,
               fontcolor="white", tooltip=f"node #{node.id}: {len(node.token_ids)} tokens, "
                                          f"{node.hit_count} hits", **mark)
        g.edge(f"n{node.parent}", f"n{node.id}", **({"penwidth": "2.5"} if mark else {}))
    return g.source


def arrow_line(row: Any, router: str) -> str:
    """"router -> replica r" with every replica's score and load, one line (markdown).

    >>> from types import SimpleNamespace as N
    >>> line = arrow_line(N(rid="A-t2", replica=1, reason="cache-hit", scores=(0.25, 1.0),
    ...                     loads=(0, 2)), "cache-aware")
    >>> line.split("; ")[1]
    'match ratio: r0 25% (0 in flight), r1 100% (2 in flight)'
    """
    label, fmt = _score_format(row, router)
    per = ", ".join(f"r{k} {fmt.format(s)} ({row.loads[k]} in flight)"
                    for k, s in enumerate(row.scores))
    return (f"**{esc_md(row.rid)}**: router → **replica {row.replica}** ({row.reason}); "
            f"{label}: {per}")


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
