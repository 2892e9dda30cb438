"""vLLM's lookup of one request, group by group: a block grid with one row per KV-cache group
(full attention, sliding window, Mamba) and one cell per block of the prompt that could hit,
and the intersection's cut drawn across every row at the agreed hit (an ECharts option for
st.echarts_chart, as viz/grid_chart.py's).

Each row shows what vLLM 0.33's manager of that kind needs for its own longest hit (its
`find_longest_cache_hit`, HybridLookedUp.group_hits): full attention every block from the
start; a sliding window only its window's blocks before the hit (the rest null); Mamba only the
block whose end holds the state (the rest null). A cell the group holds past the agreed hit is
`cut`: the group had it, another group did not. Reads a lookup record and the layout's kinds
only. Leaves out: the pool's other blocks (viz/grid_chart.py draws a pool).
"""

from __future__ import annotations

from typing import Any, NamedTuple

CELLS = ("hit", "null", "cut", "miss")  # a cell's state, as its code in the heatmap
CELL_COLOURS = {"hit": "#54a24b", "null": "#d9d9d9", "cut": "#e45756", "miss": "#ffffff"}
CELL_WORDS = {"hit": "hit", "null": "null (not needed)", "cut": "kept, cut",
              "miss": "not cached"}
KIND_WORDS = {"full_attention": "full", "sliding_window": "window", "mamba": "Mamba"}


class GroupRow(NamedTuple):
    label: str  # "group 3: full"
    kind: str  # vLLM's spec kind
    own_hit: int  # the group's own longest hit, alone (tokens)
    cells: tuple[str, ...]  # one of CELLS per block


def group_rows(kinds: tuple[str, ...], block_size: int, window: int | None,
               lookup: Any) -> list[GroupRow]:
    """One row per group for `lookup` (a HybridLookup: num_tokens, hit_tokens, group_hits).

    Qwen3.5 at block 576, R2 of 2,200 tokens: 3 blocks could hit (2,199 // 576); the full
    group holds 2 (1,152), the Mamba groups nothing, the agreed hit is 0: the full row is
    cut, cut, miss.
    >>> from types import SimpleNamespace as N
    >>> look = N(num_tokens=2200, hit_tokens=0, group_hits=(0, 1152))
    >>> [(r.label, r.cells) for r in group_rows(("mamba", "full_attention"), 576, None, look)]
    [('group 0: Mamba', ('miss', 'miss', 'miss')), ('group 1: full', ('cut', 'cut', 'miss'))]
    """
    n = max(lookup.num_tokens - 1, 0) // block_size
    rows = []
    for g, (kind, own) in enumerate(zip(kinds, lookup.group_hits)):
        held = own // block_size  # blocks the group's own hit spans
        need = range(held)  # full attention: every one
        if kind == "mamba":
            need = range(held - 1, held)
        elif kind == "sliding_window":
            w = -(-max((window or 1) - 1, 0) // block_size)  # vLLM's blocks for a window
            need = range(max(held - w, 0), held)
        cells = []
        for j in range(n):
            if j >= held:
                cells.append("miss")
            elif j not in need:
                cells.append("null")
            else:
                cells.append("hit" if (j + 1) * block_size <= lookup.hit_tokens else "cut")
        rows.append(GroupRow(f"group {g}: {KIND_WORDS.get(kind, kind)}", kind, own, tuple(cells)))
    return rows


def group_grid_chart(rows: list[GroupRow], block_size: int, hit: int, title: str,
                     text_px: int = 12) -> dict[str, Any]:
    """The rows as a heatmap, the agreed hit as a vertical line across all of them (on a value
    axis in blocks laid over the cells), each row's label with its own hit; `text_px`: every
    text's size (14 on a projector)."""
    n = max(len(rows[0].cells), 1) if rows else 1
    data = [{"value": [j, r, CELLS.index(c)],
             "name": f"{row.label}: block {j} ({j * block_size:,}..{(j + 1) * block_size:,}), "
                     f"{CELL_WORDS[c]}"}
            for r, row in enumerate(rows) for j, c in enumerate(row.cells)]
    font = {"fontSize": text_px}
    keys = [{"type": "scatter", "name": CELL_WORDS[c], "data": [], "symbol": "rect",
             "itemStyle": {"color": CELL_COLOURS[c], "opacity": 1, "borderColor": "#999999",
                           "borderWidth": 1}} for c in CELLS]
    cut = {"type": "line", "xAxisIndex": 1, "data": [], "silent": True,
           "markLine": {"symbol": "none", "silent": True, "animation": False,
                        "lineStyle": {"color": "#000000", "width": 2, "type": "solid"},
                        # under the line's foot, away from the chart's nearer edge
                        "label": {"formatter": f"agreed hit {hit:,}", "position": "end",
                                  "align": "right" if 2 * hit > n * block_size else "left",
                                  **font},
                        "data": [{"xAxis": min(hit / block_size, n)}]}}
    names = [f"{row.label} ({row.own_hit:,})" for row in rows]
    return {
        "animation": False,
        "title": {"text": title, "left": 0, "textStyle": font},
        "tooltip": {"trigger": "item", "formatter": "{b}"},
        "grid": {"left": 8 + int(0.6 * text_px * max(map(len, names), default=4)),
                 "right": 16, "top": 8 + text_px, "bottom": 16 + 2 * text_px},
        "xAxis": [{"type": "category", "data": list(range(n)), "show": False},
                  {"type": "value", "min": 0, "max": n, "show": False}],
        "yAxis": {"type": "category", "inverse": True, "data": names,
                  "axisLabel": {"fontSize": text_px, "interval": 0}, "axisTick": {"show": False},
                  "axisLine": {"show": False}},
        "visualMap": {"type": "piecewise", "show": False, "dimension": 2, "seriesIndex": 0,
                      "pieces": [{"value": i, "color": CELL_COLOURS[c]}
                                 for i, c in enumerate(CELLS)]},
        "legend": {"bottom": 0, "left": 0, "icon": "rect", "itemWidth": 12, "itemHeight": 12,
                   "selectedMode": False, "textStyle": font, "data": [k["name"] for k in keys]},
        "series": [{"type": "heatmap", "data": data,  # cell borders only where cells are wide
                    "itemStyle": {"borderColor": "#999999", "borderWidth": int(n <= 40)}},
                   *keys, cut],
    }


def grid_px(rows: list[GroupRow], text_px: int = 12) -> int:
    """The chart's height: a row of 20 px a group, the title above, the cut's label and the
    legend below (Qwen3.5's 4 groups at 14 px: 24 + 3 x 14 + 80 = 146)."""
    return 24 + 3 * text_px + 20 * len(rows)
