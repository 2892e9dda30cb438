"""The block grid as ECharts (viz/grid_chart.py) against the plotly figure it stands in for
(viz/blocks.py block_grid_figure): an oracle test, cell by cell, plus known answers."""

from __future__ import annotations

import html

import scenarios.eviction as lab
from scenarios.tour import run_tour
from viz.blocks import CHAIN_TRACE, STATE_COLORS, STATES, block_grid_figure
from viz.grid_chart import block_grid_chart, grid_height

RUN = run_tour()
AFTER_R1 = 5


def _same_as_figure(snap, **kw) -> dict:
    """Every cell of the chart is the figure's: same (column, row), state code and hover
    lines (the figure's <br> as a newline); same legend, chain cells, title and height."""
    fig, option = block_grid_figure(snap, **kw), block_grid_chart(snap, **kw)
    heat = fig.data[0]
    want = {(c, r): (z, t.replace("<br>", "\n"))
            for r, (zs, ts) in enumerate(zip(heat.z, heat.text))
            for c, (z, t) in enumerate(zip(zs, ts)) if z is not None}
    got = {(c, r): (z, cell["name"]) for cell in option["series"][0]["data"]
           for c, r, z in [cell["value"]]}
    assert got == want
    names = [t.name for t in fig.data[1:]]
    assert option["legend"]["data"] == names
    chain = [t for t in fig.data if t.name == CHAIN_TRACE]
    drawn = next((s["data"] for s in option["series"] if s.get("name") == CHAIN_TRACE), None)
    assert drawn == ([list(p) for p in zip(chain[0].x, chain[0].y)] if chain else None)
    assert grid_height(option) == fig.layout.height
    assert option["title"]["text"] == html.unescape(fig.layout.title.text)  # plain text here
    return option


def test_tour_grid_while_r1_runs():
    """While R1 runs: 135 blocks in use, 24 a row: ceil(135 / 24) = 6 rows, 110 + 16 x 6 =
    206 px; blocks 1..3 outlined as R1's chain, the cell of block #25 at column 0, row 1."""
    option = _same_as_figure(RUN.blocks[AFTER_R1 - 1], columns=24, chain_ids=[1, 2, 3],
                             stop_text="vLLM block pool: R1's chain outlined")
    cells = option["series"][0]["data"]
    assert len(cells) == 135 and cells[24]["value"] == [0, 1, STATES.index("in_use")]
    assert cells[24]["name"].startswith("block #25: in use (ref_cnt > 0)\nref_cnt 1")
    assert grid_height(option) == 206 and option["yAxis"]["data"][1] == "#25"
    pieces = option["visualMap"]["pieces"]
    assert [p["color"] for p in pieces] == [STATE_COLORS[s] for s in STATES]


def test_eviction_lab_grid_with_taken_blocks_and_labels():
    """The lab's pool after the free queue gave up its head: 'taken now' cells and legend
    entry, what each block holds in its hover (escaped by ECharts, so not by us)."""
    blk = lab.run_block_eviction(lab.DEFAULT, lab.TO_FREE)
    taken = {v.block_id for v in blk.victims}
    option = _same_as_figure(blk.after, taken=taken, labels=blk.labels, stop_text="lab")
    assert "taken now" in option["legend"]["data"]
    codes = [c["value"][2] for c in option["series"][0]["data"]]
    assert codes.count(STATES.index("taken")) == len(taken) > 0
