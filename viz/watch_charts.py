"""The Watch page's live charts as ECharts options (st.echarts_chart): each worker's block grid,
blocks stored/removed per second, and a prompt's overlap with each worker.

Why not plotly here: Streamlit 1.67 gives st.plotly_chart an element id that hashes the figure
(`key_as_main_identity=False`), so a changed figure is a new React element: the old chart is
unmounted and the new one is blank until plotly has drawn it. A page refreshing every second
showed a blank chart for a frame on most refreshes (#24 item 8). A keyed st.echarts_chart keeps
its id, and its frontend calls `setOption` on the same chart instance: the picture changes in
place. Options are plain JSON (no JS formatters); hovers are item names shown by a string
template. Leaves out: zoom and selection (the page only reads them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from viz.blocks import LEGEND_PX, STATE_COLORS, drawn_blocks, short_hash
from viz.cluster import PALETTE, WATCH_LABELS, grid_snapshot

GRID_STATES = ("cached_free", "unreachable")  # what a watched block can be (events: no refs)
TEXT = {"fontSize": LEGEND_PX}
TOOLTIP = {"trigger": "item", "formatter": "{b}", "extraCssText": "white-space: pre-line;"}


def _title(text: str) -> dict[str, Any]:
    return {"text": text, "left": 0, "textStyle": {"fontSize": LEGEND_PX}}


def chart_height(option: dict[str, Any]) -> int:
    """Pixels for one of these charts: a grid of r rows max(200, 110 + 16 r) (8 rows: 238),
    the overlap bars 80 + 40 per worker, the rates 260."""
    rows = len(option["yAxis"].get("data", ()))
    kind = option["series"][0]["type"] if option["series"] else "line"
    if kind == "heatmap":
        return max(200, 110 + 16 * rows)
    return 80 + 40 * rows if kind == "bar" else 260


def worker_grid_chart(view: Any, columns: int = 32) -> dict[str, Any]:
    """The worker's blocks in storage order, `columns` to a row (row r starts at block
    #1 + r * columns), coloured cached / unreachable; the hover says the block's hash, parent,
    batch seq and first tokens. Cells are [column, row, state index]."""
    snap = grid_snapshot(view)
    shown = drawn_blocks(snap)
    cells = []
    for i, cell in enumerate(shown):
        cells.append({"value": [i % columns, i // columns, GRID_STATES.index(cell.state)],
                      "name": _hover(view.blocks[cell.id - 1], cell)})
    rows = max(1, -(-len(shown) // columns))
    return {
        "animation": False,
        "tooltip": TOOLTIP,
        "grid": {"left": 48, "right": 10, "top": 10, "bottom": 40},
        "xAxis": {"type": "category", "data": list(range(columns)), "show": False},
        "yAxis": {"type": "category", "inverse": True,
                  "data": [f"#{1 + r * columns}" for r in range(rows)],
                  "axisLabel": {"fontSize": 12}, "axisTick": {"show": False},
                  "splitLine": {"show": False}},
        "visualMap": {"type": "piecewise", "dimension": 2, "orient": "horizontal",
                      "left": "center", "bottom": 0, "textStyle": TEXT, "selectedMode": False,
                      "pieces": [{"value": i, "label": WATCH_LABELS[s],
                                  "color": STATE_COLORS[s]} for i, s in enumerate(GRID_STATES)]},
        "series": [{"type": "heatmap", "data": cells, "itemStyle": {"borderColor": "#ffffff",
                                                                    "borderWidth": 1}}],
    }


def _hover(block: Any, cell: Any) -> str:
    tokens = list(block.token_ids[:8])
    return (f"block #{cell.id}: {WATCH_LABELS[cell.state]}\nhash {short_hash(cell.hash)}, "
            f"parent {'-' if cell.parent is None else '#' + str(cell.parent)}\nstored by "
            f"batch seq {block.seq}\ntokens {tokens}{'…' if len(block.token_ids) > 8 else ''}")


def rates_chart(views: Sequence[Any]) -> dict[str, Any]:
    """Stored (solid) and removed (dashed) blocks per second per worker; x is seconds before
    the worker's newest one-second bin (0 = now)."""
    series = []
    for i, view in enumerate(views):
        color = PALETTE[i % len(PALETTE)]
        t0 = view.rates[-1].start if view.rates else 0.0
        for field, what, dash in (("stored_per_s", "stored", "solid"),
                                  ("removed_per_s", "removed", "dashed")):
            series.append({"type": "line", "name": f"{_short(view.name)} {what}",
                           "showSymbol": False, "color": color,
                           "lineStyle": {"color": color, "type": dash},
                           "data": [[round(b.start - t0, 3), getattr(b, field)]
                                    for b in view.rates]})
    return {
        "animation": False,
        "title": _title("blocks per second"),
        "tooltip": {"trigger": "axis"},
        "legend": {"bottom": 0, "textStyle": TEXT},
        "grid": {"left": 40, "right": 10, "top": 34, "bottom": 64},
        "xAxis": {"type": "value", "name": "seconds (0 = now)", "nameLocation": "middle",
                  "nameGap": 22, "nameTextStyle": TEXT, "axisLabel": {"fontSize": 12}},
        "yAxis": {"type": "value", "min": 0, "axisLabel": {"fontSize": 12}},
        "series": series,
    }


def overlap_chart(names: Sequence[str], overlaps: Sequence[int],
                  prompt_blocks: int) -> dict[str, Any]:
    """The KV-aware router's view of one prompt: leading blocks of it each worker holds."""
    bars = [{"value": o, "name": f"{_short(n)}: {o} of {prompt_blocks} blocks",
             "itemStyle": {"color": PALETTE[i % len(PALETTE)]},
             "label": {"show": True, "position": "insideLeft", "fontSize": 12,
                       "formatter": f"{o} of {prompt_blocks} blocks"}}
            for i, (n, o) in enumerate(zip(names, overlaps))]
    return {
        "animation": False,
        "title": _title("prompt blocks each worker holds (overlap score)"),
        "tooltip": TOOLTIP,
        "grid": {"left": 10, "right": 10, "top": 34, "bottom": 30, "containLabel": True},
        "xAxis": {"type": "value", "min": 0, "max": max(prompt_blocks, 1), "name": "blocks",
                  "axisLabel": {"fontSize": 12}},
        "yAxis": {"type": "category", "data": [_short(n) for n in names],
                  "axisLabel": {"fontSize": 12}},
        "series": [{"type": "bar", "data": bars}],
    }


def _short(name: str) -> str:
    return name.removeprefix("tcp://")


__all__ = ["chart_height", "overlap_chart", "rates_chart", "worker_grid_chart"]
