"""Pictures of a routed cluster: where each request went and why, and the router's own view.

Reads scenarios/routing.py's plain data (`Routed` rows, the router view) and never runs a
router or a cache. `routing_chart` (an ECharts option): one row per replica, one dot per
request in arrival order, coloured by the decision's reason, the chosen request ringed, the
path from the router drawn to its replica. `scores_rows`: the chosen request's per-replica
scores and loads, for a table. `replica_tree_dot` and `approx_tree_dot`: a replica's radix
tree and the router's approximate tree as compact Graphviz DOT (token counts, not tokens),
coloured by replica (PALETTE, the Watch page's colours); a request's path (viz.scene's
`match_path`) drawn with thick black borders, the replica that received it on a pale yellow
ground. What the step changed (scenarios/routing_steps.py) is drawn and animated: new nodes
and router boxes carry the SVG class `rl-added` (a purple border; STEP_CSS grows them in),
evicted nodes come back once as dashed ghosts (`rl-gone`, "-96" tokens, fading to half), and
the receiving replica's ground flashes (`rl-chosen`); with reduced motion the marks stay and
nothing moves. `arrow_line`: "router -> replica r" with every replica's score and load. Leaves
out: token text (the Tour's tree view shows it); moving nodes between layouts (Streamlit's
Graphviz redraws, so changes are marked and animated in place rather than tweened).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import graphviz

from viz.cluster import PALETTE
from viz.escape import esc_md
from viz.scene import match_path

CHOSEN_GROUND = "#fff4c2"  # the receiving replica's chart background
ADDED = "#6a1b9a"  # a new node's border (dark purple: unlike every replica colour and the path)
# the step's animation, for st.html on the page: classes set by the DOT below
STEP_CSS = """<style>
@keyframes rl-grow { from { transform: scale(0.2); opacity: 0; }
  to { transform: none; opacity: 1; } }
@keyframes rl-fade { from { opacity: 1; } to { opacity: 0.5; } }
@keyframes rl-flash { 0%, 60% { fill: #ffd84d; } 100% { fill: #fff4c2; } }
g.rl-added > * { transform-box: fill-box; transform-origin: center;
  animation: rl-grow 0.9s ease-out both; }
g.rl-gone { animation: rl-fade 1.2s ease-in forwards; }
g.rl-chosen > polygon:first-of-type { animation: rl-flash 1.2s ease-out; }
@media (prefers-reduced-motion: reduce) { g.rl-added > *, g.rl-gone,
  g.rl-chosen > polygon:first-of-type { animation: none; } }
</style>"""

REASON_COLOURS = {"cache-hit": "#54a24b", "prefix-match": "#54a24b", "lowest-cost": "#54a24b",
                  "cache-miss": "#4c78a8", "smallest-tree": "#4c78a8", "imbalance": "#e45756",
                  "turn": "#9d755d", "random": "#9d755d", "least-load": "#72b7b2",
                  "power-of-two": "#72b7b2", "session": "#b279a2"}
SCORE_LABELS = {"cache-aware": "match ratio", "prefix-affinity": "match rate",
                "kv-overlap": "cost (lower wins)", "least-load": "tokens in flight",
                "power-of-two": "tokens in flight"}


def routing_chart(routed: Sequence[Any], current: int, num_replicas: int) -> dict[str, Any]:
    """x = request (arrival order), y = replica; the current request ringed, with its path
    from the router (the top row) drawn: an ECharts option (st.echarts_chart, keyed). The
    page's request slider moves the ring on every step; a plotly figure there was a new element
    each time (Streamlit 1.67 ids a plotly chart by its whole figure), blank until drawn
    (#24); a keyed ECharts chart is redrawn in place (viz/watch_charts.py). Hovers: the
    request id and why it went there."""
    rows = ["router", *(f"replica {k}" for k in range(num_replicas))]
    reasons = list(dict.fromkeys(r.reason for r in routed))
    series: list[dict[str, Any]] = [
        {"type": "scatter", "name": reason, "symbolSize": 14,
         "itemStyle": {"color": REASON_COLOURS.get(reason, "#888")},
         "data": [{"value": [i + 1, rows[r.replica + 1]], "name": f"{r.rid}: {r.why}"}
                  for i, r in enumerate(routed) if r.reason == reason]}
        for reason in reasons]
    if 0 <= current < len(routed):
        at = [current + 1, rows[routed[current].replica + 1]]
        series.append({"type": "line", "name": "path", "silent": True, "showSymbol": False,
                       "data": [[current + 1, "router"], at],
                       "lineStyle": {"color": "#333", "width": 2, "type": "dotted"}})
        series.append({"type": "scatter", "name": "this request", "silent": True,
                       "symbolSize": 24, "data": [at],
                       "itemStyle": {"color": "rgba(0,0,0,0)", "borderColor": "#333",
                                     "borderWidth": 3}})
    text = {"fontSize": 14}
    return {
        "animation": False,
        "tooltip": {"trigger": "item", "formatter": "{b}"},
        "legend": {"bottom": 0, "data": reasons, "textStyle": text},
        "grid": {"left": 10, "right": 10, "top": 10, "bottom": 60, "containLabel": True},
        "xAxis": {"type": "value", "name": "request (arrival order)", "nameLocation": "middle",
                  "nameGap": 24, "nameTextStyle": text, "minInterval": 1,
                  "min": 0, "max": len(routed) + 1, "axisLabel": text},
        "yAxis": {"type": "category", "data": rows, "inverse": True, "axisLabel": text},
        "series": series,
    }


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


# presenter mode shows the charts at their own size (pages/cluster.py PRESENTER_CSS), where a
# point is 4/3 px: 11 pt labels are 14.7 px on screen, the presenter rule's 14
PRESENTER_FONT_PT = 11


def _graph(name: str, rankdir: str = "LR", font: int = 14) -> graphviz.Digraph:
    return graphviz.Digraph(name, graph_attr={"rankdir": rankdir, "bgcolor": "transparent",
                                              "nodesep": "0.12", "ranksep": "0.2"},
                            node_attr={"shape": "box", "style": "filled,rounded",
                                       "fontname": "DejaVu Sans", "fontsize": str(font),
                                       "height": "0.3", "margin": "0.06,0.02"},
                            edge_attr={"arrowsize": "0.5"})


def replica_tree_dot(snapshot: Any, replica: int, prompt: Sequence[int] = (),
                     chosen: bool = False, change: Any = None, font: int = 14) -> str:
    """A replica's radix tree, compact for a small multiple: one box per node labelled with its
    tokens (and its hit count), in the replica's colour; top down. The nodes `prompt` walks
    (`match_path`) get a thick black border; `chosen` tints the ground (it received the
    request). `change` (a routing_steps `ReplicaChange`): its new nodes get a purple border and
    the class rl-added, its evicted nodes are drawn as dashed ghosts. Node names are
    `n<node id>`, stable across snapshots of the same tree. `font`: label size in points."""
    g = _graph(f"replica{replica}", "TB", font)
    if chosen:
        g.graph_attr.update(bgcolor=CHOSEN_GROUND, **{"class": "rl-chosen"})
    fill = PALETTE[replica % len(PALETTE)]
    path = set(match_path(snapshot, prompt)) if prompt else set()
    added = change.added if change is not None else frozenset()
    for node in snapshot.nodes:
        if node.parent is None:
            g.node(f"n{node.id}", label="root", fillcolor="#eeeeee")
            continue
        hits = f" h{node.hit_count}" if node.hit_count else ""
        mark = {"color": "black", "penwidth": "3"} if node.id in path else {}
        if node.id in added:
            mark = {"color": mark.get("color", ADDED), "penwidth": "3", "class": "rl-added"}
        g.node(f"n{node.id}", label=f"{len(node.token_ids)}{hits}", fillcolor=fill,
               fontcolor="white", tooltip=f"node #{node.id}: {len(node.token_ids)} tokens, "
                                          f"{node.hit_count} hits", **mark)
        g.edge(f"n{node.parent}", f"n{node.id}",
               **({"penwidth": "2.5"} if node.id in path else {}))
    if change is not None:
        _ghosts(g, change.gone, {n.id for n in snapshot.nodes})
    return g.source


def _ghosts(g: graphviz.Digraph, gone: Sequence[Any], present: set[int]) -> None:
    """Evicted nodes, dashed and labelled with the tokens they freed, under their old parent
    (itself a ghost, or still there, else the root)."""
    ids = {x.id for x in gone}
    for ghost in gone:
        parent = ghost.parent if ghost.parent in present or ghost.parent in ids else 0
        g.node(f"g{ghost.id}", label=f"-{ghost.tokens}", fillcolor="white", fontcolor="#333333",
               color="#555555", style="dashed,rounded,filled",
               tooltip=f"node #{ghost.id} evicted: {ghost.tokens} tokens", **{"class": "rl-gone"})
        g.edge(f"{'g' if parent in ids else 'n'}{parent}", f"g{ghost.id}", style="dashed",
               color="#777777", **{"class": "rl-gone"})


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


def approx_tree_dot(view: dict[str, Any], added: frozenset[int] = frozenset(),
                    font: int = 14) -> str:
    """The router's approximate tree, as scenarios/routing.py's chains: a box per run of blocks
    sent to the same replicas ("5 blk"), filled with that replica's colour (grey when several
    share it); the boxes in `added` (chain keys new or changed this step) get a purple border and
    the class
    rl-added.

    >>> dot = approx_tree_dot({"chains": [(7, 0, 3, (0,)), (9, 7, 1, (0, 1))]}, frozenset({9}))
    >>> "3 blk" in dot, 'class="rl-added"' in dot
    (True, True)
    """
    g = _graph("approx", font=font)
    g.node("n0", label="router", fillcolor="#eeeeee")
    for key, parent, count, tenants in view["chains"]:
        one = len(tenants) == 1
        mark = {"color": ADDED, "penwidth": "3", "class": "rl-added"} if key in added else {}
        g.node(f"n{key}", label=f"{count} blk", fontcolor="white" if one else "black",
               fillcolor=PALETTE[tenants[0] % len(PALETTE)] if one else "#bbbbbb",
               tooltip=f"routed to replica(s) {', '.join(map(str, tenants))}", **mark)
        g.edge(f"n{parent}", f"n{key}")
    return g.source
