"""Pictures for the Scheduler page: the queue moving under a sort, and the cold burst.

`queue_figure` is an animated scatter: one marker per waiting request at (place in the queue,
cached match); its two frames, "before" and "after", move each marker (plotly keeps identity by
`ids`) so a click on play shows LPM building its staircase and the deprioritized requests
(crosses) sliding to the back. `burst_figure` compares the shared prefix tokens each run
prefilled, round by round. `match_scene` draws the tree the sort matched against, one
request's match path highlighted (folded to fit in presenter mode). Fonts are large: these are
read from a projector; the play buttons sit on the left, clear of plotly's toolbar. Reads
scenarios.scheduler's results (duck-typed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from viz.escape import esc_html
from viz.scene import fit_tree_scene, match_path, tree_scene

KIND_COLORS = {"warm history": "#1f77b4", "warm S+F": "#4c9be8", "warm S": "#9ecae1",
               "cold doc": "#d62728", "cold short": "#ff9896", "cold unique": "#7f7f7f"}
MAX_TEXT = 40  # rid labels on markers only for queues up to this size


def _traces(sort: Any, where: str) -> list[go.Scatter]:
    out = []
    for kind in KIND_COLORS:
        rows = [r for r in sort.rows if r.kind == kind]
        show_text = len(sort.rows) <= MAX_TEXT and kind.startswith("warm")  # cold ones: y = 0
        out.append(go.Scatter(
            x=[getattr(r, where) for r in rows], y=[r.prefix_len for r in rows],
            ids=[r.rid for r in rows], name=kind, mode="markers+text" if show_text else "markers",
            cliponaxis=False,
            text=[r.rid[1:] for r in rows] if show_text else None, textposition="top center",
            marker=dict(size=16, color=KIND_COLORS[kind], line=dict(width=1, color="#333"),
                        symbol=["x" if r.deprioritized else "circle" for r in rows]),
            customdata=[[r.rid, r.in_batch_len if r.in_batch_len is not None else "-",
                         "yes" if r.deprioritized else "no"] for r in rows],
            hovertemplate="%{customdata[0]}: match %{y:,}, in-batch %{customdata[1]}, "
                          "deprioritized %{customdata[2]}<extra></extra>"))
    return out


def queue_figure(sort: Any) -> go.Figure:
    """Frames 'before' and 'after'; the figure opens on 'after'. x: place (0 = admitted first)."""
    n = len(sort.rows)
    top = max((r.prefix_len for r in sort.rows), default=0) or 1
    fig = go.Figure(data=_traces(sort, "after"),
                    frames=[go.Frame(data=_traces(sort, w), name=w) for w in ("before", "after")])
    step = dict(frame=dict(duration=900, redraw=False), transition=dict(duration=800),
                mode="immediate")
    fig.update_layout(
        height=450, font=dict(size=16), margin=dict(l=10, r=10, t=80, b=10),
        title=dict(text=esc_html(f"{sort.policy} (ran: {sort.active_policy})"), x=0.5,
                   xanchor="center", y=0.97),
        xaxis=dict(title="place in the waiting queue (0 = offered to admission first)",
                   range=[-1, n]),
        # room above the highest marker for its label (clipped at the plot's top, issue 41)
        yaxis=dict(title="cached match (tokens)", range=[-0.04 * top, 1.15 * top]),
        legend=dict(orientation="h", y=-0.25),
        updatemenus=[dict(type="buttons", direction="left", x=0, xanchor="left", y=1.2,
                          showactive=False,
                          buttons=[dict(label="▶ before → after", method="animate",
                                        args=[["before", "after"], step]),
                                   dict(label="before", method="animate",
                                        args=[["before"], step])])])
    return fig


def burst_figure(runs: list[Any]) -> go.Figure:
    """Stacked bars: prefix tokens prefilled per round, one bar per run."""
    fig = go.Figure()
    num_rounds = max(len(r.rounds) for r in runs)
    for k in range(num_rounds):
        fig.add_trace(go.Bar(
            x=[r.label for r in runs],
            y=[r.rounds[k].prefix_prefilled if k < len(r.rounds) else 0 for r in runs],
            name=f"round {k + 1}", text=[f"{r.rounds[k].prefix_prefilled:,}" if k < len(r.rounds)
                                         and r.rounds[k].prefix_prefilled else "" for r in runs]))
    fig.update_layout(barmode="stack", height=380, font=dict(size=16),
                      title="shared-prefix tokens prefilled (of 64 x 2,000)",
                      yaxis=dict(title="tokens", tickformat=","),
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig


def match_scene(tree: Any, prompt: Sequence[int],
                fit: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """The tree snapshot `tree` with the nodes a match of `prompt` walks highlighted as
    "matched"; `fit` (presenter mode: view width and height, smallest label, in px): folded
    until every label keeps that size (viz/scene.py's fit_tree_scene), the path always drawn."""
    highlight = {i: "matched" for i in match_path(tree, prompt)}
    if fit is None:
        return tree_scene(tree, highlight=highlight)
    return fit_tree_scene(tree, *fit, highlight=highlight)
