"""scenarios/tour.py: the Tour's walks (three requests, the multi-turn lock walk, a repeat), the
numbers and counters of both caches, and where each block lookup stopped."""

from __future__ import annotations

import pytest

from radix import events as ev
from scenarios.tour import (
    WALKS,
    block_counters,
    block_index,
    first_step_of,
    lookup_of,
    rid_at,
    run_tour,
    tour_numbers,
    tree_counters,
    walk_requests,
)
from viz.blocks import free_queue, lookup_line, queue_line, queue_runs, request_chain
from viz.timeline import Timeline

RUN = run_tour()
AFTER_R1 = 5  # steps: reset, then R1's match, lock, insert, unlock


def test_split_narration_and_numbers():
    """R2 = S+F+80 leaves R1 = S+F+96 at token 512 + 1,543 = 2,055: 2,151 -> 2,055 + 96.
    The end: stored 512 + 1,543 + 96 + 80 + 2,112 = 4,343; apart 2,151 + 2,135 + 2,624 = 6,910;
    saved 2,567 = 2,567 x 131,072 B = 320.9 MiB; 2,567 / 22,036 tok/s = 116.5 ms."""
    tl = Timeline(RUN.log)
    step, k = first_step_of(RUN, "NodeSplit")
    f = tl.frame(step, k)
    assert f.narration.startswith("R2 leaves R1 at token 2,055: node #1 splits into 2,055 + 96")
    assert "input_len - 1" not in f.narration  # R2 differs from R1 there: not the cap
    assert sorted(f.highlight.values()) == ["split", "split"]
    before = tl.frame(*tl.prev(step, k))
    assert len(f.snapshot.nodes) == len(before.snapshot.nodes) + 1
    end = tl.frame(tl.num_steps)
    n = tour_numbers(RUN, end.snapshot, tl.num_steps, 0)
    assert (n.stored, n.apart, n.saved) == (4_343, 6_910, 2_567)
    assert round(n.saved_mib, 1) == 320.9 and round(n.saved_prefill_ms, 1) == 116.5


def test_values_are_slots_not_token_ids():
    """The tree stores KV slots from a SlotAllocator: R1's leaf holds slots 1..2,151, not its
    token ids (which are drawn from 1,000..999,999)."""
    leaf = RUN.log.snapshot_at(AFTER_R1).by_id()[1]
    assert leaf.slot_ids == tuple(range(1, 2_152))
    assert leaf.token_ids != leaf.slot_ids


def test_counters_count_a_lookup_at_the_same_frame():
    """Both caches count a request's lookup from its match step's first micro-event. At step 5,
    event 1 (R2's split, before its PrefixMatched): looked up 2,151 + 2,135 = 4,286 in both;
    hits: tree 2,055 (S + F), blocks 128 x 16 = 2,048. At every frame the two looked-up counts
    agree."""
    tl = Timeline(RUN.log)
    tree = tree_counters(RUN, tl.frame(5, 1).snapshot, 5, 1)
    blocks = block_counters(RUN, 5, 1)
    assert (tree.looked_up, tree.hit, blocks.looked_up, blocks.hit) == (4_286, 2_055, 4_286, 2_048)
    assert tree_counters(RUN, tl.frame(5, 0).snapshot, 5, 0).looked_up == 2_151
    for step in range(tl.num_steps + 1):
        for k in range(tl.num_micro(step) + 1):
            t = tree_counters(RUN, tl.frame(step, k).snapshot, step, k)
            assert t.looked_up == block_counters(RUN, step, k).looked_up, (step, k)


def test_counters_both_caches_at_the_end():
    """Tree: 0 + 2,055 + 512 = 2,567 of 6,910 = 37.1%; blocks 0 + 2,048 + 512 = 2,560 = 37.0%.
    Cached: tree 4,343; blocks 271 full blocks x 16 = 4,336; all evictable (nothing running)."""
    end = RUN.log.num_steps
    tree = tree_counters(RUN, Timeline(RUN.log).frame(end).snapshot, end, 0)
    blocks = block_counters(RUN, end, 0)
    assert (tree.hit, tree.looked_up, tree.cached, tree.protected) == (2_567, 6_910, 4_343, 0)
    assert (blocks.hit, blocks.looked_up, blocks.cached, blocks.evictable) == (
        2_560, 6_910, 4_336, 4_336)


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


def test_r2_lookup_stops_at_block_128_on_a_miss():
    """R2 = S + F + 80: S + F = 512 + 1,543 = 2,055 = 128 x 16 + 7. Blocks 0..127 are R1's;
    block 128 holds the 7 last shared tokens and 9 of R2's own, so its hash misses:
    2,048 hit tokens, 7 of the tree's 2,055 re-prefilled."""
    rec = lookup_of(RUN, "R2", 13, 0)
    assert (rec.hit_blocks, rec.hit_tokens, rec.stop_block, rec.reason) == (128, 2_048, 128, "miss")
    text = lookup_line(rec, 16, 2_055)
    assert "hit 128 blocks (2,048 tokens) of 2,135; stopped at block 128" in text
    assert "The tree matched 2,055: 7 shared tokens re-prefilled." in text
    assert lookup_of(RUN, "R2", AFTER_R1, 0) is None
    assert lookup_of(RUN, "R2", 5, 1) is not None  # shown from R2's match step's first event


def test_r2_chain_and_free_queue_after_r1():
    """After R1 (2,151 = 134 full blocks in blocks 1..134, + 7 tokens in block 135, uncached),
    R2's 2,135 // 16 = 133 full blocks: links 0..127 are blocks 1..128, cached and free;
    links 128..132 are not cached. R1 frees last block first: 135 (no hash) to the head, 134..1
    to the tail: one ascending run 135..432 of 298 free; then 134..1 cached (134)."""
    snap = RUN.blocks[AFTER_R1]
    links = request_chain(snap, RUN.prompts[1])
    assert len(links) == 133
    assert [lk.block_id for lk in links[:128]] == list(range(1, 129))
    assert {lk.state for lk in links[:128]} == {"cached_free"}
    assert all(lk.block_id is None for lk in links[128:])
    assert queue_runs(free_queue(snap)) == [(135, 432, "free", 298), (134, 1, "cached_free", 134)]
    assert queue_line(snap).startswith("free queue, head first (taken next): #135..#432 free")


def test_multi_turn_lock_walks_five_hops_to_the_root_and_back():
    """u000-t5's match ends in turn 4's leaf, 5 nodes below the root: S (split off by u001-t1),
    turn 1's rest, turns 2, 3, 4. inc_lock_ref walks 5 hops up, each node's lock_ref 0 -> 1
    (u000's nodes are free between its turns); dec_lock_ref walks the same 5 back to 0. Each
    hop is its own frame, highlighted, with the hops left to the root in its sentence."""
    run = run_tour("multi-turn")
    tl = Timeline(run.log)
    step, k = first_step_of(run, "LockChanged", 5)
    hops = [e for e in run.log.micro_events(step) if isinstance(e, ev.LockChanged)]
    assert len(hops) == 5 and [h.lock_ref for h in hops] == [1] * 5
    path = [h.node_id for h in hops]
    snap = tl.frame(step).snapshot.by_id()
    assert snap[path[-1]].parent == 0 and all(snap[a].parent == b for a, b in zip(path, path[1:]))
    lines = [tl.frame(step, i).narration for i in range(k, k + 5)]
    assert lines[0].startswith(f"u000-t5 locks #{path[0]}: lock_ref 0 → 1")
    assert "4 more hop(s) to the root" in lines[0] and "the last hop below the root" in lines[4]
    for i, nid in enumerate(path):
        f = tl.frame(step, k + i)
        assert f.highlight == {nid: "lock"} and f.snapshot.by_id()[nid].lock_ref == 1
        assert all(f.snapshot.by_id()[p].lock_ref == 0 for p in path[i + 1:])
    unlock = [e for e in run.log.micro_events(step + 2) if isinstance(e, ev.LockChanged)]
    assert [h.node_id for h in unlock] == path and [h.lock_ref for h in unlock] == [0] * 5


def test_multi_turn_matches_design_numbers():
    """Turn 5's prompt is 4,720 = 4,300 + 300 + 120; the tree holds turn 4's prompt + reply
    less its last token (SGLang caches (prompt + output)[:-1]): 4,300 + 299 = 4,599 matched."""
    run = run_tour("multi-turn")
    assert run.prompt_lens[-1] == 4_720
    m = next(e for e in run.log.micro_events(run.match_steps[-1])
             if isinstance(e, ev.PrefixMatched))
    assert (m.key_len, m.prefix_len) == (4_719, 4_599)


def test_repeat_splits_at_input_len_minus_one_and_says_why():
    """R1 twice: the repeat's key is its 2,151 tokens less the last = 2,150; the match ends one
    token before the end of R1's leaf and splits it 2,150 + 1; the words say why."""
    run = run_tour("repeat")
    tl = Timeline(run.log)
    step, k = first_step_of(run, "NodeSplit")
    line = tl.frame(step, k).narration
    assert "splits into 2,150 + 1" in line and "input_len - 1 = 2,151 - 1" in line
    assert run.stored == [2_151, 2_151] and tl.frame(tl.num_steps).snapshot.total_size == 2_151


@pytest.mark.parametrize("name", list(WALKS))
def test_every_walk_is_consistent(name):
    """Every walk: 1 + 4 steps a request, one block snapshot per step, requests in order."""
    run = run_tour(name)
    assert run.log.num_steps == 1 + 4 * len(walk_requests(name))
    assert len(run.blocks) == run.log.num_steps + 1
    assert run.rids == [r.rid for r in walk_requests(name)]
    with pytest.raises(ValueError, match="walk"):
        walk_requests("nope")
