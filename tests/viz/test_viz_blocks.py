"""Known answers for the block view (viz/blocks.py): the one grid, its states, captions, lookups."""

from __future__ import annotations

from radix.blocks.hashing import hash_request_tokens
from radix.blocks.manager import LookupRecord
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import take_snapshot
from scenarios.tour import run_tour
from viz.blocks import (
    CHAIN_TRACE,
    LEGEND_PX,
    STATE_COLORS,
    STATES,
    block_grid_figure,
    cell_states,
    drawn_blocks,
    grid_caption,
    grid_cells,
    hover_text,
    lookup_line,
)

RUN = run_tour()
AFTER_R1 = 5


def test_grid_cells_and_figure_while_r1_runs():
    """While R1 runs (after its insert: 135 blocks in use), 135 cells are drawn, 24 a row:
    ceil(135 / 24) = 6 rows, the last padded with 6 x 24 - 135 = 9 empty cells."""
    snap = RUN.blocks[AFTER_R1 - 1]
    blocks = drawn_blocks(snap)
    assert len(blocks) == 135
    z, text = grid_cells(blocks, 24)
    assert len(z) == 6 and z[-1].count(None) == 9 and z[0][0] == STATES.index("in_use")
    assert "block #1: in use" in text[0][0] and "owners R1" in text[0][0]
    fig = block_grid_figure(snap, columns=24, chain_ids=[1, 2, 3])
    chain = [t for t in fig.data if t.name == CHAIN_TRACE]
    assert list(chain[0].x) == [0, 1, 2] and list(chain[0].y) == [0, 0, 0]
    assert fig.layout.legend.font.size >= 12 and fig.layout.title.font.size >= 12
    assert grid_caption(snap).startswith("432 blocks of 16 tokens: 135 in use, 0 cached")
    assert grid_caption(snap, chain_ids=[1, 140, 141]).endswith(
        "blocks #136..#432 not drawn (2 of the chain's 3 blocks among them).")


def test_unreachable_block_is_coloured_and_counted():
    """A 2-block chain freed head first (1, then 2) and 2 fresh blocks taken: the queue pops
    3 (never used) and 1, evicting the chain's first hash; block 2 stays cached but no lookup
    can reach it."""
    pool = BlockPool(4, block_size=4)
    a, b = pool.get_new_blocks(2)
    pool.cache_full_blocks([a, b], hash_request_tokens(list(range(8)), 4), 0, 2)
    pool.free_blocks([a, b])
    pool.get_new_blocks(2)
    snap = take_snapshot(pool, {}, 0)
    assert [s.state for s in snap.blocks] == ["in_use", "unreachable", "in_use"]
    z, _ = grid_cells(drawn_blocks(snap), 8)
    assert z[0][:3] == [0, STATES.index("unreachable"), 0]
    assert "chain position 1, parent block -" in hover_text(snap.blocks[1])
    assert "1 unreachable" in grid_caption(snap)


def test_one_grid_one_colour_per_state_and_taken_blocks():
    """Every page draws with this grid: each state has one colour, unreachable included; blocks
    a new request just took read 'taken now' (legend and caption), hovers escape uploaded text."""
    assert len(set(STATE_COLORS.values())) == len(STATES) and LEGEND_PX >= 12
    snap = RUN.blocks[AFTER_R1]
    assert cell_states(snap, {1, 2})[:3] == ["taken", "taken", "cached_free"]
    fig = block_grid_figure(snap, taken={1, 2}, labels={1: "<b>x</b>"})
    assert "taken now" in {t.name for t in fig.data}
    assert "&lt;b&gt;x&lt;/b&gt;" in fig.data[0].text[0][0]
    assert "2 taken now" in grid_caption(snap, taken={1, 2})
    assert "taken now" not in {t.name for t in block_grid_figure(snap).data}


def test_lookup_line_reasons():
    cap = LookupRecord("x", 32, 1, 16, 1, "cap")
    assert "block 1 (tokens 16..31): cap" in lookup_line(cap, 16)
    assert "re-prefilled" not in lookup_line(cap, 16, tree_hit=16)
