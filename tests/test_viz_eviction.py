"""The eviction lab's viz functions: known answers for the tree, the frames and the block cache."""

from __future__ import annotations

import re

import pytest

from radix import events as ev
from radix.tree.eviction import POLICIES
from viz.eviction_lab import (
    RAG,
    SYSTEM,
    build_tree,
    check_params,
    compare_policies,
    describe,
    run_eviction,
)
from viz.eviction_lab_blocks import run_block_eviction
from viz.eviction_lab_draw import (
    MAX_DRAWN,
    collapsed_dot,
    drawn_conversations,
    lab_frame,
    num_frames,
)
from viz.eviction_lab_grid import cell_states, grid_figure
from viz.timeline import Timeline


def test_state_sizes_and_locks():
    """512 + 2,112 + 400 x 24 = 12,224 tokens; live: S (512) + 400 x 24 = 10,112 protected;
    the RAG leaf's 2,112 are the only evictable tokens. S is node 2 with r=400."""
    cache, names, conv_ids = build_tree()
    assert cache.total_size() == 12_224
    assert (cache.protected_size(), cache.evictable_size()) == (10_112, 2_112)
    assert names[2] == SYSTEM and names[1] == RAG and conv_ids == list(range(3, 403))
    assert cache.node(2).lock_ref == 400 and len(cache.node(2).key) == 512
    assert [n.id for n in cache.evictable_leaves] == [1]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_frees_the_rag_leaf_never_s(policy):
    """One evictable leaf: evict(300) pops it whole, 2,112 freed, 2,112 - 300 = 1,812 over."""
    run = run_eviction(policy)
    assert run.evicted == [(1, RAG, 2_112)]
    assert run.num_evicted == 2_112 and run.overshoot == 1_812
    assert [c.name for c in run.candidates] == [RAG]


def test_compare_table_default_and_repeat_hit():
    """All seven rows agree; afterwards a repeat of the RAG request reuses S only: 512."""
    rows = compare_policies()
    assert [r.policy for r in rows] == list(POLICIES)
    assert {(r.evicts, r.freed, r.overshoot, r.system_evicted, r.rag_repeat_hit) for r in rows} \
        == {("RAG context (2,112)", 2_112, 1_812, False, 512)}


def test_finished_conversations_split_the_policies():
    """392 live: conv-000..007 finished (leaves #3..#10). The RAG leaf was last touched by
    conv-000's insert walk, which entered it before splitting it; each new leaf then read the
    clock itself (as SGLang's TreeNode does), so every conversation leaf is younger than RAG.
    LRU/FIFO/LFU/priority/SLRU: RAG first (2,112 >= 300, done). MRU: conv-007..000 (most recent
    first, 8 x 24 = 192), then RAG: 2,304 (over 2,004). FILO (creation): the same 2,304."""
    rows = {r.policy: r for r in compare_policies(num_live=392)}
    assert rows["mru"].evicts == "conv-007 … conv-000 (8 x 24), then RAG context (2,112)"
    assert (rows["mru"].freed, rows["mru"].overshoot) == (2_304, 2_004)
    assert (rows["filo"].freed, rows["filo"].num_leaves) == (2_304, 9)
    for p in ("lru", "fifo", "lfu", "priority", "slru"):
        assert rows[p].evicts == "RAG context (2,112)"


def test_cascade_when_every_conversation_finished():
    """No live conversation, 20,000 asked: the RAG leaf, the 400 conversations, then S itself,
    which joins the candidates in the same call once its last child is gone: 12,224 freed."""
    run = run_eviction("lru", num_live=0, to_free=20_000)
    assert run.num_evicted == 12_224 and run.evicted[-1] == (2, SYSTEM, 512)
    micro = run.log.micro_events(run.evict_step)
    assert any(isinstance(e, ev.LeafSetChanged) and e.added == (2,) for e in micro)
    lines = [lab_frame(run, Timeline(run.log), k).line for k in range(len(micro) - 3, len(micro))]
    assert any(line.startswith("cascade: system prompt S (#2)") for line in lines)


def test_frames_default_run():
    """Frames: before, pick, pop, after = 4. Narration and counters at each."""
    run = run_eviction("lru")
    tl = Timeline(run.log)
    assert num_frames(run) == 4
    frames = [lab_frame(run, tl, k) for k in range(4)]
    assert frames[0].line.startswith("evict(300) under lru: 1 evictable leaf; system prompt S")
    assert frames[1].line == "lru picks RAG context (#1): the smallest sort key left"
    assert frames[2].line.startswith("pops RAG context (#1, 2,112 tokens")
    assert frames[2].line.endswith("2,112 of 300 freed")
    assert frames[3].line == ("done: 2,112 tokens freed for 300 asked; overshoot 1,812 (whole "
                              "leaves go). system prompt S stays.")
    assert [f.freed for f in frames] == [0, 0, 2_112, 2_112]
    assert (frames[0].evictable, frames[3].evictable, frames[3].protected) == (2_112, 0, 10_112)
    assert '"n1"' in frames[2].dot and 'color="#d62728"' in frames[2].dot  # popped leaf in red
    assert '"n1"' not in frames[3].dot


def test_collapsed_picture_counts_all_400():
    """8 conversations drawn (ids 3..10); the summary stands for 392 live ones, 392 x 24 =
    9,408 tokens; S reads r=400; 12 DOT nodes (root, S, RAG, 8 conversations, summary "m2":
    viz/dot.py's fold under S, node 2)."""
    run = run_eviction()
    drawn = drawn_conversations(run)
    assert drawn == list(range(3, 3 + MAX_DRAWN))
    dot = collapsed_dot(run, run.log.snapshot_at(run.evict_step), {}, drawn)
    assert len(re.findall(r'^\s+"[nm]\d+" \[id=', dot, flags=re.M)) == 12
    assert 'label="+392 more\\n392 locked"' in dot
    assert '"n2" -> "m2" [id="em2", label="9,408 tok"' in dot and 'label="#2  r=400"' in dot
    assert "'RAG context…'" in dot  # edge previews name the segments


def test_drawn_prefers_popped_then_mixes_finished_and_live():
    """396 live, MRU: conv-003..000 are finished and all popped first (ids 6, 5, 4, 3), then
    live ones fill the picture (ids 7..10)."""
    run = run_eviction("mru", num_live=396)
    assert drawn_conversations(run) == [6, 5, 4, 3, 7, 8, 9, 10]


def test_block_cache_takes_19_tail_blocks():
    """964 blocks = 164 (RAG) + 400 x 2. Free queue: RAG blocks 163 .. 32 (132; S's 32 are in
    use). ceil(300 / 16) = 19 blocks taken: RAG blocks 163 .. 145, 19 x 16 = 304 tokens. None
    unreachable; a repeat of the RAG prompt reuses blocks 0..144 = 2,320 tokens."""
    b = run_block_eviction()
    assert b.num_blocks == 964 and len(b.queue) == 132
    assert [q.holds for q in b.queue[:2]] == ["RAG block 163", "RAG block 162"]
    assert b.num_needed == b.num_wanted == 19
    assert [v.holds for v in b.victims] == [f"RAG block {p}" for p in range(163, 144, -1)]
    assert b.cached_tokens_dropped == 304
    assert b.unreachable_after == [] and b.rag_repeat_hit == 2_320
    assert b.before.num_free == 132 and b.after.num_free == 113


def test_block_cache_with_finished_conversations():
    """392 live: 8 finished conversations put their partial (unhashed) block 33 at the head,
    newest first, so 8 of the 19 blocks drop nothing cached; then RAG blocks 163..153:
    11 x 16 = 176 cached tokens. Asking 100,000 tokens (6,250 blocks) with 132 free: short."""
    b = run_block_eviction(num_live=392)
    assert [v.holds for v in b.victims[:2]] == ["conv-007 block 33 (partial, not cached)",
                                                "conv-006 block 33 (partial, not cached)"]
    assert b.cached_tokens_dropped == 176 and b.victims[-1].holds == "RAG block 153"
    short = run_block_eviction(to_free=100_000)
    assert (short.num_wanted, short.num_needed) == (6_250, 132)


def test_grid_states_and_legend():
    """After: 19 taken, 113 cached free, 832 in use (32 of S + 800 conversations' own)."""
    b = run_block_eviction()
    taken = {v.block_id for v in b.victims}
    states = cell_states(b.after, taken)
    assert (states.count("taken"), states.count("cached_free"), states.count("in_use")) == (
        19, 113, 832)
    fig = grid_figure(b.after, b.labels, taken)
    assert {t.name for t in fig.data[1:]} == {"in use (ref_cnt > 0)", "cached, free (in the "
                                              "queue)", "taken now (hash dropped)"}


def test_describe_and_bad_parameters_name_the_field():
    assert describe([]) == "nothing"
    with pytest.raises(ValueError, match="^policy: 'lrfu'"):
        check_params("lrfu", 2, 400, 300)
    with pytest.raises(ValueError, match="^num_live: 401"):
        check_params("lru", 2, 401, 300)
    with pytest.raises(ValueError, match="^to_free: 0"):
        run_eviction("lru", to_free=0)


def test_end_line_says_when_the_call_falls_short():
    """All 400 live, evict(5,000): only the RAG leaf (2,112) is evictable; 5,000 - 2,112 = 2,888
    short, no overshoot claimed."""
    run = run_eviction("lru", to_free=5_000)
    line = lab_frame(run, Timeline(run.log), num_frames(run) - 1).line
    assert line == ("done: only 2,112 tokens freed for 5,000 asked, 2,888 short: everything else "
                    "is locked by live requests. system prompt S stays.")
