"""viz/blocks.py's block grid as an ECharts option (st.echarts_chart), for pages that redraw it.

Why: Streamlit 1.67 keys st.plotly_chart by its whole figure, so a grid whose figure changes (a
Tour step, an Eviction lab setting) is a new element, blank for a frame until plotly has drawn
it (#24). A keyed st.echarts_chart keeps its element and calls `setOption` on the same chart:
the grid changes in place (viz/watch_charts.py does the same for the Watch grids). Same cells
(blocks in id order, `columns` to a row), colours (STATE_COLORS), legend, title and hovers (the
plotly hover's lines, as plain text: ECharts escapes an item's name) as `block_grid_figure`,
whose plotly figure stays for the exports. Leaves out: plotly's zoom and toolbar.

`fold_rows=N` (presenter mode: the Eviction lab's 31 rows ran past the fold at 1280x800) draws
each run of at least N whole rows alike (every block in one state, none in the chain) as one row
labelled with the run's first and last block ("#257-928", an en dash), its cells' hovers
saying so;
`folded_line` says in words what was folded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from viz.blocks import (
    CHAIN_TRACE,
    LEGEND_PX,
    MAX_DRAWN_BLOCKS,
    SHORT_LABELS,
    STATE_COLORS,
    STATE_LABELS,
    STATES,
    cell_states,
    drawn_blocks,
    hover_lines,
)

GRID = {"left": 48, "right": 10, "top": 34, "bottom": 52}  # bottom: a legend of two lines
CHAIN_PX = 9  # the chain's outline squares, as the plotly figure's markers
LABEL_CHAR_PX = 8  # a row label's character at 14 px, a little over (digits are ~7.8 px)


class Fold(NamedTuple):
    """Rows `first`..`last` (0-based) of the grid, blocks `first_block`..`last_block`, all in
    `state`, drawn as one row."""

    first: int
    last: int
    first_block: int
    last_block: int
    state: str

    @property
    def label(self) -> str:  # the row's axis label
        return f"#{self.first_block}\u2013{self.last_block}"


def alike_runs(blocks: Sequence[Any], columns: int, taken: Collection[int] = (),
               chain_ids: Collection[int] = (), min_rows: int = 2) -> list[Fold]:
    """Each run of at least `min_rows` whole rows whose blocks are all in one state (a block
    in `taken` reads 'taken') and none in `chain_ids`; a last, partial row never folds.

    >>> from types import SimpleNamespace as B
    >>> blocks = [B(id=i, state="in_use" if i < 9 else "free") for i in range(1, 12)]
    >>> alike_runs(blocks, 2)  # rows 0-3 in use (blocks 1-8); row 4 free alone; 5 partial
    [Fold(first=0, last=3, first_block=1, last_block=8, state='in_use')]
    >>> alike_runs(blocks + [B(id=12, state="free")], 2)[1]  # rows 4-5 free: a second fold
    Fold(first=4, last=5, first_block=9, last_block=12, state='free')
    """
    chain = set(chain_ids)
    whole = len(blocks) // columns
    kinds: list[str | None] = []
    for r in range(whole):
        row = blocks[r * columns:(r + 1) * columns]
        states = {"taken" if b.id in taken else b.state for b in row}
        alike = len(states) == 1 and not any(b.id in chain for b in row)
        kinds.append(states.pop() if alike else None)
    runs, r = [], 0
    while r < whole:
        end = r
        while end + 1 < whole and kinds[r] is not None and kinds[end + 1] == kinds[r]:
            end += 1
        if kinds[r] is not None and end - r + 1 >= max(2, min_rows):
            runs.append(Fold(r, end, blocks[r * columns].id, blocks[end * columns + columns - 1].id,
                             kinds[r]))
        r = end + 1
    return runs


def folded_line(snap: Any, columns: int = 32, taken: Collection[int] = (),
                chain_ids: Collection[int] = (), min_rows: int = 2,
                max_blocks: int = MAX_DRAWN_BLOCKS) -> str | None:
    """What `block_grid_chart(..., fold_rows=min_rows)` folded, in words; None if nothing."""
    runs = alike_runs(drawn_blocks(snap, max_blocks), columns, taken, chain_ids, min_rows)
    if not runs:
        return None
    parts = [f"{f.label} ({f.last - f.first + 1} rows, all {SHORT_LABELS[f.state]})"
             for f in runs]
    return "Folded to fit, each drawn as one row: " + "; ".join(parts) + "."


def grid_height(option: dict[str, Any]) -> int:
    """The chart's height in px, as `block_grid_figure`'s: max(200, 110 + 16 rows)
    (15 rows: 350)."""
    return max(200, 110 + 16 * len(option["yAxis"]["data"]))


def block_grid_chart(snap: Any, columns: int = 32, chain_ids: Collection[int] = (),
                     stop_text: str | None = None, max_blocks: int = MAX_DRAWN_BLOCKS,
                     taken: Collection[int] = (), labels: Mapping[int, str] | None = None,
                     legend_px: int = LEGEND_PX, axis_px: int = 12,
                     fold_rows: int = 0) -> dict[str, Any]:
    """The grid of `block_grid_figure(snap, ...)` (same arguments): one heatmap cell per block,
    [column, row, state code], row r = blocks 1 + r * columns ..; `chain_ids` outlined in
    black, a legend entry per state drawn (and 'taken now' when present). `axis_px`: the row
    labels' size; `fold_rows` > 0: runs of that many rows alike are one row (module doc)."""
    blocks = drawn_blocks(snap, max_blocks)
    labels = labels or {}
    rows = max(1, -(-len(blocks) // columns))
    names = [f"#{1 + r * columns}" for r in range(rows)]
    drawn_row = list(range(rows))  # grid row -> the row it is drawn on
    folds = alike_runs(blocks, columns, taken, chain_ids, fold_rows) if fold_rows else []
    for f in reversed(folds):  # the rows after a run move up by its length less one
        drawn_row[f.first:] = ([drawn_row[f.first]] * (f.last - f.first + 1)
                               + [d - (f.last - f.first) for d in drawn_row[f.last + 1:]])
        names[f.first:f.last + 1] = [f.label]
    folded = {r: f for f in folds for r in range(f.first, f.last + 1)}
    cells = []
    for i, b in enumerate(blocks):
        row, state = i // columns, "taken" if b.id in taken else b.state
        fold = folded.get(row)
        if fold is not None and row != fold.first:
            continue
        hover = (hover_lines(b, state, labels.get(b.id)) if fold is None else
                 [f"blocks #{fold.first_block}..#{fold.last_block}: "
                  f"{fold.last - fold.first + 1} rows folded into one",
                  f"every block {STATE_LABELS[state]}"])
        cells.append({"value": [i % columns, drawn_row[row], STATES.index(state)],
                      "name": "\n".join(hover)})
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
                     "data": [[c % columns, drawn_row[c // columns]] for c in chain]})
    font = {"fontSize": legend_px}
    return {
        "animation": False,
        "title": {"text": stop_text or "", "left": 0, "textStyle": font},
        "tooltip": {"trigger": "item", "formatter": "{b}",
                    "extraCssText": "white-space: pre-line;"},
        "grid": (GRID if not folds else  # the run labels are longer
                 dict(GRID, left=max(GRID["left"], 8 + LABEL_CHAR_PX * max(map(len, names))))),
        "xAxis": {"type": "category", "data": list(range(columns)), "show": False},
        "yAxis": {"type": "category", "inverse": True,
                  "data": names,
                  "axisLabel": {"fontSize": axis_px, **({"interval": 0} if fold_rows else {})},
                  "axisTick": {"show": False},
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


__all__ = ["Fold", "alike_runs", "block_grid_chart", "folded_line", "grid_height"]
