"""The Cluster page's per-request snapshots (scenarios/routing.py's frames: trees and the
router's view) and what each step changed (scenarios/routing_steps.py)."""

from __future__ import annotations

import json

import pytest

import scenarios.routing as routing
from radix.traces import TraceError
from scenarios.routing import (
    MAX_UPLOAD_REQUESTS,
    SYSTEM,
    classroom_trace,
    run_routing,
    upload_trace,
)
from scenarios.routing_steps import change_note, step_changes
from viz.routing import replica_tree_dot


def _edges(snap) -> list[tuple[int, ...]]:
    """Every node but the root as the edge lengths on its path from the root, sorted."""
    by_id = snap.by_id()

    def lengths(node_id):
        node = by_id[node_id]
        return () if node.parent is None else (*lengths(node.parent), len(node.token_ids))
    return sorted(lengths(n.id) for n in snap.nodes if n.parent is not None)


def test_round_robin_trees_after_each_request_known_answer():
    """Round robin sends request k to replica k mod 3 (A-t1, B-t1, C-t1, D-t1 -> 0, 1, 2, 0).
    Each first turn is SYSTEM (32 tokens) + 96 of its own, 8 tokens out; turns arrive 0.2 s
    apart, long enough to finish, so by the next arrival its replica's tree holds the prompt and
    7 output tokens (the 8th token out was never fed back, so it has no KV to cache). After
    D-t1 (request 4), replica 0 shares SYSTEM between A-t1 and D-t1:
    root -> 32 -> {96 -> 7, 96 -> 7}; replicas 1 and 2: root -> 128 -> 7. After
    A-t1 only replica 0 holds anything. D-t1's prompt walks the 32-token node and D's 96."""
    run = run_routing(classroom_trace(), "round-robin")
    assert [r.replica for r in run.routed[:4]] == [0, 1, 2, 0]
    assert [f.after for f in run.frames] == list(range(17))  # one per request, classroom-sized
    first = run.frames[0].trees
    assert _edges(first[0]) == [(128,), (128, 7)] and _edges(first[1]) == _edges(first[2]) == []
    after_d = run.frames[3]
    r0, r1, r2 = after_d.trees
    assert _edges(r0) == [(32,), (32, 96), (32, 96), (32, 96, 7), (32, 96, 7)]
    assert _edges(r1) == _edges(r2) == [(128,), (128, 7)]
    shared = next(n for n in r0.nodes if n.parent == 0)
    assert shared.token_ids == SYSTEM and shared.hit_count == 2
    own = {n.token_ids[0] for n in r0.nodes if n.parent == shared.id}
    assert own == {1000, 4000}  # A's and D's own tokens start at 1000 and 4000
    dot = replica_tree_dot(r0, 0, after_d.prompt, chosen=True)
    d_node = next(n.id for n in r0.nodes if n.token_ids[:1] == (4000,))
    assert f'n{shared.id} [label="32 h2" color=black' in dot
    assert f"n{d_node} [label=" in dot and "#fff4c2" in dot
    assert dot.count("penwidth=3") == 2  # the path: SYSTEM and D's own 96, not A's


def test_a_request_still_queued_is_not_in_its_tree_yet():
    """The burst's five follow-ups arrive together at 12 s: A-t4 (request 13, replica 0 under
    round robin) is still queued when A-t5 arrives, so replica 0's tree right after A-t4 is the
    one right after D-t3 (request 12, which went to replica 2)."""
    run = run_routing(classroom_trace(), "round-robin")
    assert run.routed[12].rid == "A-t4" and run.routed[12].replica == 0
    assert run.frames[12].trees[0] == run.frames[11].trees[0]
    assert run.frames[12].trees[0] != run.frames[16].trees[0]  # later it has been prefilled


def test_long_runs_keep_every_stride_th_frame(monkeypatch):
    """MAX_FRAMES = 5 on 17 requests: stride ceil(17/5) = 4, frames after requests 1, 5, 9, 13
    and 17 (indices 0, 4, 8, 12, 16, the last); request 6 shows the one after request 5, and
    each kept frame equals the full run's frame for the same request."""
    monkeypatch.setattr(routing, "MAX_FRAMES", 5)
    run = run_routing(classroom_trace(), "cache-aware")
    assert [f.after for f in run.frames] == [0, 4, 8, 12, 16]
    assert run.frame_at(5).after == 4 and run.frame_at(16).after == 16
    monkeypatch.setattr(routing, "MAX_FRAMES", 120)
    assert run_routing(classroom_trace(), "cache-aware").frames[8].trees == run.frames[2].trees


def test_step_changes_known_answer():
    """Round robin. Step 1 (A-t1 -> replica 0): replica 0 gains its prompt's node and the 7
    output tokens' node (+2 nodes, 128 + 7 = 135 tokens); the others stay empty. Step 4 (D-t1
    -> replica 0): D shares SYSTEM with A, so A's 128-token node splits: a new 32-token parent
    (new id), A's node keeps its id with 96 tokens, and D adds 96 + 7 (+3 nodes, +103 tokens).
    Nothing is evicted (unbounded pools). Round robin keeps no view."""
    run = run_routing(classroom_trace(), "round-robin")
    one = step_changes(None, run.frames[0])
    assert [len(c.added) for c in one.replicas] == [2, 0, 0]
    assert [c.tokens for c in one.replicas] == [135, 0, 0] and one.span == 1
    four = step_changes(run.frames[2], run.frames[3])
    r0 = four.replicas[0]
    by_id = run.frames[3].trees[0].by_id()
    assert sorted(len(by_id[i].token_ids) for i in r0.added) == [7, 32, 96]
    assert r0.tokens == 103 and r0.gone == () and not four.replicas[1].any
    assert change_note(r0) == "+3 nodes" and change_note(four.replicas[1]) == "no change"
    dot = replica_tree_dot(run.frames[3].trees[0], 0, run.frames[3].prompt, True, r0)
    assert dot.count('class="rl-added"') == 3 and 'class="rl-chosen"' in dot


def test_router_view_follows_the_step():
    """Cache-aware's approximate tree after each request, in blocks of 16: after A-t1 one box
    of 8 blocks (SYSTEM + 96 own tokens) for replica 0. B-t1 matches 2 of its 8 blocks there
    (25% < cache_threshold 0.3), so it goes to the smallest tree (replica 1); its SYSTEM blocks
    now have two tenants: the box splits into SYSTEM's 2 shared blocks (it keeps its first
    block's key, changed: 2 blocks, two tenants) and A's 6 (a new key), and B's 6 are new: 3
    boxes new or changed. A-t2 then extends A's box on replica 0 (same key, longer): 1
    changed. The view at the last step is the end-of-run view."""
    run = run_routing(classroom_trace(), "cache-aware")
    first, second = run.frames[0].view, run.frames[1].view
    assert [(c[2], c[3]) for c in first["chains"]] == [(8, (0,))]
    assert run.routed[1].replica == 1
    assert sorted((c[2], c[3]) for c in second["chains"]) == [(2, (0, 1)), (6, (0,)), (6, (1,))]
    change = step_changes(run.frames[0], run.frames[1])
    assert len(change.view_added) == 3 and first["chains"][0][0] in change.view_added
    third = step_changes(run.frames[3], run.frames[4])
    assert run.routed[4].rid == "A-t2" and len(third.view_added) == 1
    assert run.frames[-1].view == run.view and second["sizes"] == [8, 8, 0]


def test_evicted_nodes_are_drawn_as_ghosts():
    """A node that went between two snapshots comes back once, dashed, under its old parent
    (or the root when that went too), labelled with the tokens it freed."""
    run = run_routing(classroom_trace(), "round-robin")
    before, after = run.frames[0], run.frames[0]._replace(
        trees=(run.frames[0].trees[1],) + run.frames[0].trees[1:], after=1)
    change = step_changes(before, after).replicas[0]  # replica 0's two nodes "evicted"
    assert [g.tokens for g in change.gone] == [128, 7] and change.tokens == -135
    dot = replica_tree_dot(after.trees[0], 0, (), False, change)
    ghosts = [g.id for g in change.gone]
    assert f"g{ghosts[0]} [label=-128 " in dot and f"n0 -> g{ghosts[0]}" in dot
    assert f"g{ghosts[0]} -> g{ghosts[1]}" in dot and dot.count('class="rl-gone"') == 4


def test_upload_trace_names_the_line_and_bounds_the_size():
    """A good two-line request trace loads; a bad second line is a TraceError naming line 2; one
    request over MAX_UPLOAD_REQUESTS is refused, saying the bound."""
    def lines(n):
        return "".join(json.dumps({"rid": f"r{i}", "arrival": i, "tokens": [1, 2, i],
                                   "output_len": 1}) + "\n" for i in range(n)).encode()
    assert [r.rid for r in upload_trace(lines(2)).requests] == ["r0", "r1"]
    with pytest.raises(TraceError, match="line 2"):
        upload_trace(lines(1) + b'{"rid": "x", "tokens": "no"}\n')
    with pytest.raises(ValueError, match=f"at most {MAX_UPLOAD_REQUESTS} requests"):
        upload_trace(lines(MAX_UPLOAD_REQUESTS + 1))
