"""vLLM's block pool as a plotly grid: one cell per 16-token block, coloured by state.

Reads a `BlockPoolSnapshot` (radix/block_snapshot.py); never touches the pool. Cells run in
block-id order, left to right, `columns` to a row; hover shows block id, ref_cnt, short hash,
chain position, parent block, free-queue position and owners. The selected request's chain is
outlined. Leaves out: blocks past the last non-free one (all free: drawn as a count), and past
`MAX_DRAWN_BLOCKS`, so a million-token pool still draws in the browser.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import plotly.graph_objects as go

STATES = ("in_use", "cached_free", "unreachable", "free")  # code = index
STATE_LABELS = {"in_use": "in use (ref_cnt > 0)", "cached_free": "cached, free (evictable)",
                "unreachable": "unreachable (chain broken above)", "free": "free (no hash)"}
SHORT_LABELS = {"in_use": "in use", "cached_free": "cached, free", "unreachable": "unreachable",
                "free": "free"}
STATE_COLORS = {"in_use": "#4c78a8", "cached_free": "#54a24b", "unreachable": "#e45756",
                "free": "#e6e6e6"}
CHAIN_TRACE = "hash chain"  # legend name of the outlined chain
MAX_DRAWN_BLOCKS = 4_096  # cells drawn at most (the rest are counted in the caption)
MIN_DRAWN_BLOCKS = 64  # an idle pool still draws a few rows


def short_hash(h: int | None) -> str:
    """The first 8 hex digits of the 64-bit hash, as vLLM's KV events carry it.

    >>> short_hash(0x1234_5678_9abc_def0), short_hash(None)
    ('12345678', '-')
    """
    return "-" if h is None else f"{h:016x}"[:8]


def hover_text(b: Any) -> str:
    """One block's hover: `b` is a BlockState."""
    owners = ", ".join(b.owners) if b.owners else "-"
    return (f"block #{b.id}: {STATE_LABELS[b.state]}<br>ref_cnt {b.ref_cnt}, "
            f"hash {short_hash(b.hash)}<br>chain position "
            f"{'-' if b.chain_pos is None else b.chain_pos}, parent block "
            f"{'-' if b.parent is None else '#' + str(b.parent)}<br>free queue position "
            f"{'-' if b.free_pos is None else b.free_pos} (0 = evicted next)<br>owners {owners}")


def drawn_blocks(snap: Any, max_blocks: int = MAX_DRAWN_BLOCKS) -> tuple[Any, ...]:
    """Blocks 1 .. the last one that is not plain free, at least MIN_DRAWN_BLOCKS, capped.

    A 433-block pool (432 + the null block) holding blocks 1..135: 135 drawn.
    """
    last = max((i for i, b in enumerate(snap.blocks) if b.state != "free"), default=-1) + 1
    n = min(len(snap.blocks), max(last, MIN_DRAWN_BLOCKS), max_blocks)
    return snap.blocks[:n]


def state_counts(snap: Any) -> dict[str, int]:
    """Blocks per state, every state present (the null block is not counted)."""
    counts = dict.fromkeys(STATES, 0)
    for b in snap.blocks:
        counts[b.state] += 1
    return counts


def grid_cells(blocks: Sequence[Any], columns: int) -> tuple[list, list]:
    """Rows of state codes (None past the end) and hover texts, row 0 = blocks 1..columns."""
    z: list[list[int | None]] = []
    text: list[list[str]] = []
    for start in range(0, len(blocks), columns):
        row = blocks[start:start + columns]
        pad = columns - len(row)
        z.append([STATES.index(b.state) for b in row] + [None] * pad)
        text.append([hover_text(b) for b in row] + [""] * pad)
    return z, text


def _colorscale() -> list[list]:
    """A stepped scale: code i fills [i/4, (i+1)/4) with STATE_COLORS[STATES[i]]."""
    scale = []
    for i, state in enumerate(STATES):
        scale += [[i / len(STATES), STATE_COLORS[state]], [(i + 1) / len(STATES),
                                                           STATE_COLORS[state]]]
    return scale


def block_grid_figure(snap: Any, columns: int = 32, chain_ids: Collection[int] = (),
                      stop_text: str | None = None,
                      max_blocks: int = MAX_DRAWN_BLOCKS) -> go.Figure:
    """The grid; `chain_ids` (block ids of the selected request's chain) are outlined in black,
    `stop_text` is the title line (where its lookup stopped)."""
    blocks = drawn_blocks(snap, max_blocks)
    z, text = grid_cells(blocks, columns)
    fig = go.Figure(go.Heatmap(
        z=z, text=text, hovertemplate="%{text}<extra></extra>", colorscale=_colorscale(),
        zmin=-0.5, zmax=len(STATES) - 0.5, showscale=False, xgap=1, ygap=1))
    for state in STATES:  # legend entries (a heatmap has none); hover has the long labels
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=SHORT_LABELS[state],
                                 legendgroup=state, marker={"symbol": "square", "size": 11,
                                         "color": STATE_COLORS[state]}))
    index = {b.id: i for i, b in enumerate(blocks)}
    cells = [index[i] for i in chain_ids if i in index]
    if cells:
        fig.add_trace(go.Scatter(
            x=[c % columns for c in cells], y=[c // columns for c in cells], mode="markers",
            name=CHAIN_TRACE, hoverinfo="skip",
            marker={"symbol": "square-open", "size": 9, "color": "#000000",
                    "line": {"width": 1.5}}))
    rows = len(z)
    fig.update_layout(
        height=max(180, 90 + 16 * rows), margin={"l": 40, "r": 10, "t": 30, "b": 10},
        title={"text": stop_text or "", "font": {"size": 12}},
        legend={"orientation": "h", "y": 0, "yanchor": "top", "font": {"size": 10}},
        plot_bgcolor="#ffffff")
    fig.update_xaxes(visible=False, range=[-0.5, columns - 0.5])
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(rows)),
                     ticktext=[f"#{1 + r * columns}" for r in range(rows)], tickfont={"size": 9},
                     showgrid=False, zeroline=False)
    return fig


def grid_caption(snap: Any, max_blocks: int = MAX_DRAWN_BLOCKS,
                 chain_ids: Collection[int] = ()) -> str:
    """One line: counts per state, and what was left out of the drawing (chain blocks too)."""
    counts = state_counts(snap)
    n = len(drawn_blocks(snap, max_blocks))
    parts = [f"{counts[s]:,} {SHORT_LABELS[s]}" for s in STATES]
    left = len(snap.blocks) - n
    tail = f"; blocks #{n + 1:,}..#{len(snap.blocks):,} not drawn" if left else ""
    hidden = sum(1 for i in chain_ids if i > n)
    if hidden:
        tail += f" ({hidden:,} of the chain's {len(chain_ids):,} blocks among them)"
    return (f"{len(snap.blocks):,} blocks of {snap.block_size} tokens: " + ", ".join(parts)
            + tail + ".")
