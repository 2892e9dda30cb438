"""The block pool of the eviction question as a grid of 16-token blocks (plotly).

One cell per block (block 1 top left, 32 per row), coloured by state: in use (ref_cnt > 0),
cached and free (in the free queue, hash kept, reachable), free (no hash), unreachable (cached
but an ancestor's hash is gone), and, after the new request, the blocks it just took. Hover
names what the block held and its place in the free queue.
Leaves out: hash chains (radix/block_snapshot.py has the parents).
"""

from __future__ import annotations

import plotly.graph_objects as go

from radix.blocks.snapshot import BlockPoolSnapshot

COLUMNS = 32
STATES = {  # state -> (legend text, colour)
    "in_use": ("in use (ref_cnt > 0)", "#4c78a8"),
    "cached_free": ("cached, free (in the queue)", "#54a24b"),
    "free": ("free, no hash", "#d9d9d9"),
    "unreachable": ("unreachable", "#f58518"),
    "taken": ("taken now (hash dropped)", "#e45756"),
}
CODES = {s: i for i, s in enumerate(STATES)}


def cell_states(snap: BlockPoolSnapshot, taken: set[int]) -> list[str]:
    """One state name per block, by id; blocks in `taken` read 'taken'.

    >>> from radix.blocks.pool import BlockPool; from radix.blocks.snapshot import take_snapshot
    >>> cell_states(take_snapshot(BlockPool(4), {}, 0), {2})
    ['free', 'taken', 'free']
    """
    return ["taken" if b.id in taken else b.state for b in snap.blocks]


def grid_figure(snap: BlockPoolSnapshot, labels: dict[int, str], taken: set[int] = frozenset(),
                title: str = "") -> go.Figure:
    """The grid; `taken` marks the blocks the new request just popped."""
    states = cell_states(snap, taken)
    n = len(states)
    rows = -(-n // COLUMNS)
    z: list[list[float | None]] = [[None] * COLUMNS for _ in range(rows)]
    text: list[list[str]] = [[""] * COLUMNS for _ in range(rows)]
    for i, (block, state) in enumerate(zip(snap.blocks, states)):
        r, c = divmod(i, COLUMNS)
        z[r][c] = CODES[state]
        pos = "in use" if block.free_pos is None else f"free queue #{block.free_pos}"
        text[r][c] = (f"block {block.id}: {labels.get(block.id, 'unused')}<br>{STATES[state][0]}"
                      f"<br>ref_cnt {block.ref_cnt}, {pos}")
    k = len(STATES) - 1
    scale = []
    for name, (_, color) in STATES.items():
        lo, hi = CODES[name] / (k + 1), (CODES[name] + 1) / (k + 1)
        scale += [[lo, color], [hi, color]]
    fig = go.Figure(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=scale, zmin=-0.5,
                               zmax=k + 0.5, showscale=False, xgap=1, ygap=1))
    for name, (legend, color) in STATES.items():
        if name in states:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=legend,
                                     marker=dict(size=14, color=color, symbol="square")))
    fig.update_yaxes(autorange="reversed", showticklabels=False, showgrid=False)
    fig.update_xaxes(showticklabels=False, showgrid=False)
    fig.update_layout(title=title, height=360, margin=dict(l=10, r=10, t=40, b=10),
                      font=dict(size=15), legend=dict(orientation="h", y=-0.05),
                      plot_bgcolor="white")
    return fig
