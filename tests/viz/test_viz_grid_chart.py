"""The block grid as ECharts (viz/grid_chart.py) against the plotly figure it stands in for
(viz/blocks.py block_grid_figure): an oracle test, cell by cell, plus known answers."""

from __future__ import annotations

import html

import scenarios.eviction as lab
from scenarios.tour import run_tour
from viz.blocks import (
    CHAIN_TRACE,
    STATE_COLORS,
    STATES,
    block_grid_figure,
    cell_states,
    drawn_blocks,
)
from viz.grid_chart import alike_runs, block_grid_chart, folded_line, grid_height

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


def test_presenter_fold_keeps_every_block_and_says_what_it_folded():
    """The lab's grid in presenter mode (fold_rows=2): each run of two or more rows alike is
    one row labelled with its first and last block, whose cells stand for the whole run; the
    rows left keep their cells. Every drawn block is one cell or in a folded run, in its
    state; the 31 rows come down to at most 12 (110 + 16 x 12 = 302 px, under the tree's
    345); the line under the grid names each run. Without folds the option is unchanged."""
    blk = lab.run_block_eviction(lab.DEFAULT, lab.TO_FREE)
    taken = {v.block_id for v in blk.victims}
    plain = block_grid_chart(blk.after, taken=taken, labels=blk.labels)
    option = block_grid_chart(blk.after, taken=taken, labels=blk.labels, fold_rows=2,
                              axis_px=14, legend_px=14)
    blocks = drawn_blocks(blk.after)
    runs = alike_runs(blocks, 32, taken, min_rows=2)
    names = option["yAxis"]["data"]
    assert len(plain["yAxis"]["data"]) == 31 and len(names) <= 12 and runs
    assert grid_height(option) <= 302 and option["yAxis"]["axisLabel"]["fontSize"] == 14
    states = {b.id: s for b, s in zip(blk.after.blocks, cell_states(blk.after, taken))}
    cells = {(c["value"][0], c["value"][1]): c for c in option["series"][0]["data"]}
    covered = 0
    for f in runs:
        row = names.index(f.label)
        assert f.label == f"#{f.first_block}\u2013{f.last_block}"
        assert {states[i] for i in range(f.first_block, f.last_block + 1)} == {f.state}
        assert [cells[(c, row)]["value"][2] for c in range(32)] == [STATES.index(f.state)] * 32
        assert cells[(0, row)]["name"].startswith(f"blocks #{f.first_block}..#{f.last_block}")
        covered += f.last_block - f.first_block + 1
    assert covered + len(cells) - 32 * len(runs) == len(blocks)
    line = folded_line(blk.after, taken=taken)
    assert line.startswith("Folded to fit, each drawn as one row: ")
    assert all(f"{f.label} ({f.last - f.first + 1} rows, all " in line for f in runs)
    assert block_grid_chart(blk.after, taken=taken, labels=blk.labels, fold_rows=0) == plain
