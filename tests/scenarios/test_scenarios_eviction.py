"""scenarios/eviction.py: the eviction question's tree and block cache, known answers per policy."""

from __future__ import annotations

import pytest

from radix import events as ev
from radix.tree.evict_policy import POLICIES
from scenarios.eviction import (
    DEFAULT,
    DESIGN_QUESTION,
    RAG,
    SYSTEM,
    LabState,
    build_tree,
    check_params,
    compare_policies,
    run_block_eviction,
    run_eviction,
)

ALL_LIVE = DESIGN_QUESTION


def test_state_sizes_and_locks():
    """512 + 2,112 + 400 x 24 = 12,224 tokens; all live: S (512) + 400 x 24 = 10,112
    protected; the RAG leaf's 2,112 are the only evictable ones. S is node 2 with r=400."""
    lab = build_tree(state=ALL_LIVE)
    cache = lab.cache
    assert cache.total_size() == 12_224
    assert (cache.protected_size(), cache.evictable_size()) == (10_112, 2_112)
    assert lab.names[2] == SYSTEM and lab.names[1] == RAG and lab.conv_ids == list(range(3, 403))
    assert cache.node(2).lock_ref == 400 and len(cache.node(2).key) == 512
    assert [n.id for n in cache.evictable_leaves] == [1]


@pytest.mark.parametrize("policy", POLICIES)
def test_design_question_every_policy_frees_the_rag_leaf_never_s(policy):
    """One evictable leaf: evict(300) pops it whole, 2,112 freed, 2,112 - 300 = 1,812 over."""
    run = run_eviction(policy, state=ALL_LIVE)
    assert run.evicted == [(1, RAG, 2_112)]
    assert run.num_evicted == 2_112 and run.overshoot == 1_812
    assert [c.name for c in run.candidates] == [RAG]


def test_default_the_policies_choose_differently():
    """16 finished conversations (conv-000..015, 24 tokens each, hit_count 1, priority 0) and
    the RAG leaf read twice (hit_count 2, priority 1, the oldest access). 300 tokens: LRU and
    FIFO pop RAG (oldest); LFU (hits 1 < 2), priority (0 < 1) and SLRU (RAG is in the protected
    segment at threshold 2) pop conv-000..012: ceil(300 / 24) = 13 x 24 = 312; MRU and FILO
    pop the newest, conv-015..003. Three different choices."""
    rows = {r.policy: r for r in compare_policies()}
    names = {p: [n for _, n, _ in r.evicted] for p, r in rows.items()}
    assert names["lru"] == names["fifo"] == [RAG]
    oldest = [f"conv-{i:03d}" for i in range(13)]
    newest = [f"conv-{i:03d}" for i in range(15, 2, -1)]
    assert names["lfu"] == names["priority"] == names["slru"] == oldest
    assert names["mru"] == names["filo"] == newest
    assert rows["lfu"].freed == 312 and rows["lru"].freed == 2_112
    assert rows["lru"].rag_repeat_hit == 512 and rows["lfu"].rag_repeat_hit == 2_623


def test_cascade_when_every_conversation_finished():
    """No live conversation, 20,000 asked: the RAG leaf, the 400 conversations, then S itself,
    which joins the candidates in the same call once its last child is gone: 12,224 freed."""
    run = run_eviction("lru", state=LabState(0, 1, 0), to_free=20_000)
    assert run.num_evicted == 12_224 and run.evicted[-1] == (2, SYSTEM, 512)
    micro = run.log.micro_events(run.evict_step)
    assert any(isinstance(e, ev.LeafSetChanged) and e.added == (2,) for e in micro)


def test_block_cache_takes_19_tail_blocks():
    """964 blocks = 164 (RAG) + 400 x 2. Free queue: RAG blocks 163 .. 32 (132; S's 32 are in
    use). ceil(300 / 16) = 19 blocks taken: RAG blocks 163 .. 145, 19 x 16 = 304 tokens. None
    unreachable; a repeat of the RAG prompt reuses blocks 0..144 = 2,320 tokens."""
    b = run_block_eviction(ALL_LIVE)
    assert b.num_blocks == 964 and len(b.queue) == 132 and b.num_running == 400
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
    b = run_block_eviction(LabState(392, 1, 0))
    assert [v.holds for v in b.victims[:2]] == ["conv-007 block 33 (partial, not cached)",
                                                "conv-006 block 33 (partial, not cached)"]
    assert b.cached_tokens_dropped == 176 and b.victims[-1].holds == "RAG block 153"
    short = run_block_eviction(ALL_LIVE, to_free=100_000)
    assert (short.num_wanted, short.num_needed) == (6_250, 132)
    assert run_block_eviction(LabState(0, 1, 0)).num_running == 0


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="^policy: 'lrfu'"):
        check_params("lrfu", 2, DEFAULT, 300)
    with pytest.raises(ValueError, match="^num_live: 401"):
        check_params("lru", 2, LabState(401, 1, 0), 300)
    with pytest.raises(ValueError, match="^rag_reads: 3"):
        check_params("lru", 2, LabState(1, 3, 0), 300)
    with pytest.raises(ValueError, match="^to_free: 0"):
        run_eviction("lru", to_free=0)
