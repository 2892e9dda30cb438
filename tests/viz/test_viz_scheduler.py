"""The Scheduler page's runs (scenarios/scheduler.py) and charts (viz/scheduler.py): one policy
sort, the fallback, the tree and blocks it read, the cold burst."""

from __future__ import annotations

import pytest

from scenarios.scheduler import burst_cases, check_queue_params, demo_state, run_burst, sort_queue
from viz.blocks import request_chain
from viz.scene import match_path
from viz.scheduler import burst_figure, queue_figure

COLD_DOC_LATER = ["q004", "q007", "q011", "q012", "q016", "q019", "q023"]


def _order(sort) -> list[str]:
    return [r.rid for r in sorted(sort.rows, key=lambda r: r.after)]


def test_demo_state_matches():
    """Warm history = S + F + history: 512 + 1,543 + 120/260/400/610 = 2,175/2,315/2,455/2,665;
    the tree holds S + F + the four histories + S's own 50-token request."""
    tree, queue, kinds, _ = demo_state(24)
    assert tree.total_size() == 512 + 1_543 + 120 + 260 + 400 + 610 + 50
    assert [kinds[r.rid] for r in queue[:4]] == ["cold doc", "warm S", "cold unique",
                                                 "warm history"]


def test_lpm_staircase_and_in_batch_deprioritization():
    """24 waiting, thresholds 32/32: warm history by match (q021 2,665, q015 2,455, q009 2,315,
    q003 2,175), S+F (2,055) q006 q018, S (512) q001 q013; then the cold ones in arrival order;
    q000 (first cold doc) enters the waiting-queue tree; the 7 later cold-doc requests share
    2,000 >= 32 with it and go last. Cold-short ones share 20 < 32: they stay."""
    sort = sort_queue("lpm", 24)
    assert sort.active_policy == "lpm" and sort.notice is None
    assert _order(sort)[:9] == ["q021", "q015", "q009", "q003", "q006", "q018", "q001", "q013",
                                "q000"]
    assert _order(sort)[-7:] == COLD_DOC_LATER
    rows = {r.rid: r for r in sort.rows}
    assert [rows[rid].prefix_len for rid in ("q021", "q006", "q001", "q000")] == [2665, 2055,
                                                                                  512, 0]
    assert (rows["q004"].in_batch_len, rows["q004"].deprioritized) == (2000, True)
    assert "2000 tokens shared with an earlier waiting request >= 32" in rows["q004"].reason
    assert (rows["q008"].in_batch_len, rows["q008"].deprioritized) == (20, False)
    assert rows["q001"].in_batch_len is None and "512 > 32: no in-batch check" in \
        rows["q001"].reason


def test_thresholds_change_who_waits():
    """deprioritize 16: the cold-short ones sharing 20 >= 16 (q008, q017, q020) wait too: 10.
    check -1: nobody is checked, nobody waits."""
    low = sort_queue("lpm", 24, deprioritize_threshold=16)
    assert {r.rid for r in low.rows if r.deprioritized} == set(COLD_DOC_LATER) | {
        "q008", "q017", "q020"}
    off = sort_queue("lpm", 24, check_threshold=-1)
    assert not any(r.deprioritized for r in off.rows)
    assert all(r.in_batch_len is None for r in off.rows)


def test_fallback_past_128_is_loud():
    """128 waiting: LPM runs. 129: FCFS runs, the notice says so, nothing moves, and the match
    lengths come from a measurement after the sort (no in-batch check)."""
    assert sort_queue("lpm", 128).notice is None
    sort = sort_queue("lpm", 129)
    assert sort.active_policy == "fcfs"
    assert sort.notice.startswith("LPM fell back to FCFS: 129 requests wait, more than 128")
    assert all(r.before == r.after and r.in_batch_len is None for r in sort.rows)
    assert {r.rid: r.prefix_len for r in sort.rows}["q021"] == 2665
    assert sort_queue("dfs-weight", 129).notice is None  # only LPM falls back


def test_agnostic_policies():
    """FCFS keeps arrival order; LOF sorts by max_new_tokens, largest first (stable); random is a
    seeded permutation; DFS-weight puts the 8 warm requests (under S) before the cold ones,
    which are the root's own and keep their order."""
    fcfs = sort_queue("fcfs", 24)
    assert _order(fcfs) == [f"q{i:03d}" for i in range(24)]
    lof = sort_queue("lof", 24)
    news = [r.max_new_tokens for r in sorted(lof.rows, key=lambda r: r.after)]
    assert news == sorted(news, reverse=True)
    rnd = sort_queue("random", 24)
    assert sorted(_order(rnd)) == _order(fcfs) and _order(rnd) != _order(fcfs)
    assert _order(rnd) == _order(sort_queue("random", 24))
    dfs = _order(sort_queue("dfs-weight", 24))
    warm = {"q001", "q003", "q006", "q009", "q013", "q015", "q018", "q021"}
    assert set(dfs[:8]) == warm and dfs[8:] == [r for r in _order(fcfs) if r not in warm]


def test_bad_queue_parameters_name_the_field():
    with pytest.raises(ValueError, match="^policy: 'hrrn'"):
        check_queue_params("hrrn", 24, 32, 32)
    with pytest.raises(ValueError, match="^queue size: 0"):
        sort_queue("lpm", 0)
    with pytest.raises(ValueError, match="^check_threshold: -2"):
        check_queue_params("lpm", 24, -2, 32)


def test_cold_burst_three_runs():
    """FCFS no budget: 1 round of 64, 64 x 2,000 = 128,000 prefix tokens, 129,024 in all.
    Budget 2,016: burst-00 alone (2,000), then 63 x 16: 3,024 in all, 0 duplicates.
    LPM 16,384: 63 deprioritized in round one, yet 8 admitted (7 of them deprioritized):
    2,016 x 8 = 16,128 <= 16,384; 16,000 prefix tokens; round two 56 x 16 = 896: 17,024.
    Derived: 129,024 / 22,036 tok/s = 5.86 s."""
    fcfs, one, lpm = burst_cases()
    assert [r.num_requests for r in fcfs.rounds] == [64]
    assert (fcfs.prefix_prefilled, fcfs.tokens_prefilled, fcfs.duplicates) == (128_000, 129_024,
                                                                               63)
    assert fcfs.prefill_seconds == pytest.approx(5.855, abs=1e-3)
    assert [r.num_requests for r in one.rounds] == [1, 63]
    assert (one.prefix_prefilled, one.tokens_prefilled, one.duplicates) == (2_000, 3_024, 0)
    assert one.rounds[1].prefix_reused == 126_000
    assert (lpm.deprioritized_first_round, lpm.admitted_deprioritized) == (63, 7)
    assert [(r.num_requests, r.rids) for r in lpm.rounds] == [
        (8, "burst-00 .. burst-07"), (56, "burst-08 .. burst-63")]
    assert (lpm.prefix_prefilled, lpm.tokens_prefilled, lpm.duplicates) == (16_000, 17_024, 7)
    assert lpm.rounds[0].tokens_prefilled == 16_128


def test_cold_burst_own_budget():
    """Budget 8,192: 8,192 // 2,016 = 4 fit (8,064; the 5th needs 2,016 >= 128 left)."""
    run = run_burst("lpm", 8_192)
    assert run.rounds[0].num_requests == 4 and run.prefix_prefilled == 8_000
    with pytest.raises(ValueError, match="^budget: 0"):
        run_burst("lpm", 0)


def test_charts():
    """The queue chart's frames carry the same ids, at the before and after places; the burst
    chart stacks each run's prefix tokens per round."""
    sort = sort_queue("lpm", 24)
    fig = queue_figure(sort)
    assert [f.name for f in fig.frames] == ["before", "after"]
    rows = {r.rid: r for r in sort.rows}
    for frame, where in zip(fig.frames, ("before", "after")):
        for trace in frame.data:
            assert [getattr(rows[i], where) for i in trace.ids] == list(trace.x)
    symbols = [s for t in fig.data for s in t.marker.symbol]
    assert symbols.count("x") == 7
    bars = burst_figure(burst_cases())
    assert [sum(t.y[i] for t in bars.data) for i in range(3)] == [128_000, 2_000, 16_000]


def test_the_sort_shows_the_tree_and_blocks_it_read():
    """The first offered request, q021 (S + F + the 610-token history + 40), walks S + F's node
    and its history's node in the warm tree (2,665 tokens); in vLLM's pool, after the same warm
    requests, its first (2,665 - 1) // 16 = 166 blocks are cached."""
    sort = sort_queue("lpm", 24)
    path = match_path(sort.tree, sort.prompts["q021"])
    by_id = sort.tree.by_id()
    assert sum(len(by_id[i].token_ids) for i in path) == 2_665
    chain = request_chain(sort.blocks, sort.prompts["q021"])
    assert sum(1 for lk in chain if lk.block_id is not None) == 2_665 // 16


def test_queue_chart_keeps_its_top_label_inside():
    """The highest marker's label (its rid above it) is not cut at the plot's top (issue 41
    item 10: 8 px of it above the plot): the y range runs 15% past the highest match, and no
    marker's text is clipped at the axes."""
    from scenarios.scheduler import sort_queue
    from viz.scheduler import queue_figure

    sort = sort_queue("lpm", 24, 32, 32)
    fig = queue_figure(sort)
    top = max(r.prefix_len for r in sort.rows)
    assert fig.layout.yaxis.range[1] >= 1.15 * top - 1
    assert all(t.cliponaxis is False for t in fig.data)
