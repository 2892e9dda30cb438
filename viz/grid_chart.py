"""viz/blocks.py's block grid as an ECharts option (st.echarts_chart), for pages that redraw it.

Why: Streamlit 1.67 keys st.plotly_chart by its whole figure, so a grid whose figure changes (a
Tour step, an Eviction lab setting) is a new element, blank for a frame until plotly has drawn
it (#24). A keyed st.echarts_chart keeps its element and calls `setOption` on the same chart:
the grid changes in place (viz/watch_charts.py does the same for the Watch grids). Same cells
(blocks in id order, `columns` to a row), colours (STATE_COLORS), legend, title and hovers (the
plotly hover's lines, as plain text: ECharts escapes an item's name) as `block_grid_figure`,
whose plotly figure stays for the exports. Leaves out: plotly's zoom and toolbar.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from viz.blocks import (
    CHAIN_TRACE,
    LEGEND_PX,
    MAX_DRAWN_BLOCKS,
    SHORT_LABELS,
    STATE_COLORS,
    STATES,
    cell_states,
    drawn_blocks,
    hover_lines,
)

GRID = {"left": 48, "right": 10, "top": 34, "bottom": 52}  # bottom: a legend of two lines
CHAIN_PX = 9  # the chain's outline squares, as the plotly figure's markers


def grid_height(option: dict[str, Any]) -> int:
    """The chart's height in px, as `block_grid_figure`'s: max(200, 110 + 16 rows)
    (15 rows: 350)."""
    return max(200, 110 + 16 * len(option["yAxis"]["data"]))


def block_grid_chart(snap: Any, columns: int = 32, chain_ids: Collection[int] = (),
                     stop_text: str | None = None, max_blocks: int = MAX_DRAWN_BLOCKS,
                     taken: Collection[int] = (), labels: Mapping[int, str] | None = None,
                     legend_px: int = LEGEND_PX) -> dict[str, Any]:
    """The grid of `block_grid_figure(snap, ...)` (same arguments): one heatmap cell per block,
    [column, row, state code], row r = blocks 1 + r * columns ..; `chain_ids` outlined in
    black, a legend entry per state drawn (and 'taken now' when present)."""
    blocks = drawn_blocks(snap, max_blocks)
    labels = labels or {}
    cells = []
    for i, b in enumerate(blocks):
        state = "taken" if b.id in taken else b.state
        cells.append({"value": [i % columns, i // columns, STATES.index(state)],
                      "name": "\n".join(hover_lines(b, state, labels.get(b.id)))})
    rows = max(1, -(-len(blocks) // columns))
    present = set(cell_states(snap, taken))
    shown = [s for s in STATES if s in present or s != "taken"]
    # legend entries: empty series in each state's colour (a heatmap has no legend of its own;
    # a scatter's default opacity is 0.8: 1 keeps the cells' colours)
    keys = [{"type": "scatter", "name": SHORT_LABELS[s], "data": [], "symbol": "rect",
             "itemStyle": {"color": STATE_COLORS[s], "opacity": 1}} for s in shown]
    index = {b.id: i for i, b in enumerate(blocks)}
    chain = [index[i] for i in chain_ids if i in index]
    if chain:
        keys.append({"type": "scatter", "name": CHAIN_TRACE, "symbol": "rect",
                     "symbolSize": CHAIN_PX, "silent": True, "tooltip": {"show": False},
                     "itemStyle": {"color": "rgba(0,0,0,0)", "borderColor": "#000000",
                                   "borderWidth": 1.5, "opacity": 1},
                     "data": [[c % columns, c // columns] for c in chain]})
    font = {"fontSize": legend_px}
    return {
        "animation": False,
        "title": {"text": stop_text or "", "left": 0, "textStyle": font},
        "tooltip": {"trigger": "item", "formatter": "{b}",
                    "extraCssText": "white-space: pre-line;"},
        "grid": GRID,
        "xAxis": {"type": "category", "data": list(range(columns)), "show": False},
        "yAxis": {"type": "category", "inverse": True,
                  "data": [f"#{1 + r * columns}" for r in range(rows)],
                  "axisLabel": {"fontSize": 12}, "axisTick": {"show": False},
                  "axisLine": {"show": False}, "splitLine": {"show": False}},
        "visualMap": {"type": "piecewise", "show": False, "dimension": 2, "seriesIndex": 0,
                      "pieces": [{"value": i, "color": STATE_COLORS[s]}
                                 for i, s in enumerate(STATES)]},
        "legend": {"bottom": 0, "left": 0, "icon": "rect", "itemWidth": 12, "itemHeight": 12,
                   "itemGap": 8, "selectedMode": False, "textStyle": font,
                   "data": [k["name"] for k in keys]},
        "series": [{"type": "heatmap", "data": cells,
                    "itemStyle": {"borderColor": "#ffffff", "borderWidth": 1}}, *keys],
    }


__all__ = ["block_grid_chart", "grid_height"]
