"""The Cluster page's per-request tree snapshots (scenarios/routing.py's frames)."""

from __future__ import annotations

import scenarios.routing as routing
from scenarios.routing import SYSTEM, classroom_trace, run_routing
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
