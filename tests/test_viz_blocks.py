"""Known answers for the block view: the grid, the hash chain, the free queue, the Tour's blocks."""

from __future__ import annotations

from radix.blocks.hashing import hash_request_tokens
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import take_snapshot
from viz.blocks_chain import free_queue, lookup_line, queue_line, queue_runs, request_chain
from viz.blocks_grid import (
    CHAIN_TRACE,
    STATES,
    block_grid_figure,
    drawn_blocks,
    grid_caption,
    grid_cells,
    hover_text,
)
from viz.timeline import Timeline
from viz.tour import (
    block_counters,
    block_index,
    counter_table,
    lookup_of,
    lookup_text,
    rid_at,
    run_tour,
    tree_counters,
)

RUN = run_tour()
AFTER_R1 = 5  # steps: reset, then R1's match, lock, insert, unlock


def test_r2_lookup_stops_at_block_128_on_a_miss():
    """R2 = S + F + 80: S + F = 512 + 1,543 = 2,055 = 128 x 16 + 7. Blocks 0..127 are R1's;
    block 128 holds the 7 last shared tokens and 9 of R2's own, so its hash misses:
    2,048 hit tokens, 2,135 - 2,048 = 87 prefilled, 7 of them already in the tree."""
    rec = lookup_of(RUN, "R2", 13, 0)
    assert (rec.hit_blocks, rec.hit_tokens, rec.stop_block, rec.reason) == (128, 2_048, 128, "miss")
    text = lookup_text(RUN, "R2", 13, 0)
    assert "hit 128 blocks (2,048 tokens) of 2,135; stopped at block 128" in text
    assert "The tree matched 2,055: 7 shared tokens re-prefilled." in text
    assert lookup_text(RUN, "R2", AFTER_R1, 0) == "R2 has not been looked up yet."
    assert lookup_of(RUN, "R2", 5, 1) is not None  # shown from R2's match step's first event


def test_r2_chain_in_the_pool_after_r1():
    """After R1 (2,151 = 134 full blocks in blocks 1..134, + 7 tokens in block 135, uncached),
    R2's 2,135 // 16 = 133 full blocks: links 0..127 are blocks 1..128, cached and free;
    links 128..132 are not cached."""
    snap = RUN.blocks[AFTER_R1]
    links = request_chain(snap, RUN.prompts[1])
    assert len(links) == 133
    assert [lk.block_id for lk in links[:128]] == list(range(1, 129))
    assert {lk.state for lk in links[:128]} == {"cached_free"}
    assert all(lk.block_id is None for lk in links[128:])


def test_free_queue_after_r1_head_first():
    """R1 frees last block first: block 135 (no hash) goes to the head, 134..1 to the tail:
    135, 136..432 (never used) = one ascending run of 298 free; then 134..1 cached (134)."""
    snap = RUN.blocks[AFTER_R1]
    assert queue_runs(free_queue(snap)) == [(135, 432, "free", 298), (134, 1, "cached_free", 134)]
    assert queue_line(snap).startswith("free queue, head first (taken next): #135..#432 free")


def test_counters_both_caches_at_the_end():
    """Tree: 0 + 2,055 + 512 = 2,567 of 6,910 = 37.1%; blocks 0 + 2,048 + 512 = 2,560 = 37.0%.
    Cached: tree 4,343; blocks 271 full blocks x 16 = 4,336; all evictable (nothing running)."""
    end = RUN.log.num_steps
    tree = tree_counters(RUN, Timeline(RUN.log).frame(end).snapshot, end, 0)
    blocks = block_counters(RUN, end, 0)
    assert (tree.hit, tree.looked_up, tree.cached, tree.protected) == (2_567, 6_910, 4_343, 0)
    assert (blocks.hit, blocks.looked_up, blocks.cached, blocks.evictable) == (
        2_560, 6_910, 4_336, 4_336)
    table = counter_table(tree, blocks)
    assert table["radix tree"][:2] == ["2,567 of 6,910", "37.1%"]
    assert table["block cache (16-token blocks)"][:2] == ["2,560 of 6,910", "37.0%"]


def test_counters_mid_walk_protected_blocks():
    """After R2's lock step (touch of its 128 hits): 128 x 16 = 2,048 tokens protected, R1's
    other 6 full blocks (96 tokens) evictable; the tree locks 2,055 on R2's path."""
    step = AFTER_R1 + 2  # R2's match and lock played
    blocks = block_counters(RUN, step, 0)
    assert (blocks.protected, blocks.evictable) == (2_048, 96)
    tree = tree_counters(RUN, Timeline(RUN.log).frame(step).snapshot, step, 0)
    assert (tree.protected, tree.evictable) == (2_055, 96)
    assert rid_at(RUN, 0) == "R1" and rid_at(RUN, step) == "R2" and rid_at(RUN, 13) == "R3"
    assert block_index(step, 0, 13) == step and block_index(step, 2, 13) == step + 1


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


def test_lookup_line_reasons():
    from radix.blocks.manager import LookupRecord

    cap = LookupRecord("x", 32, 1, 16, 1, "cap")
    assert "block 1 (tokens 16..31): cap" in lookup_line(cap, 16)
    assert "re-prefilled" not in lookup_line(cap, 16, tree_hit=16)


def test_trace_block_replay_agrees_with_cmd_compare():
    """Oracle: the Trace debugger's block replay over every request gives run_blocks' totals
    (hit tokens, evictions, rejections, unreachable blocks) on the eviction-question trace at
    2,000 tokens, where one request does not fit."""
    from pathlib import Path

    from radix.runs.compare import compare
    from radix.traces import load_trace
    from viz.blocks_trace import replay_blocks

    trace = load_trace(Path(__file__).resolve().parent.parent / "examples" / "traces"
                       / "eviction_question.jsonl.gz")
    want = compare(trace, 2_000)["blocks"]
    got = replay_blocks(trace, 2_000)
    assert sum(r.hit_tokens for r in got.lookups.values()) == want["hit_tokens"]
    assert got.snapshot.num_unreachable == want["unreachable_blocks"]
    assert len(got.rejected) == want["rejected"] == 1
    assert got.num_evictions == want["evictions"] > 0
    assert replay_blocks(trace, 2_000, num_requests=1).num_requests == 1
