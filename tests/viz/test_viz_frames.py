"""Every narration frame of the Tour names what it changed and highlights it (issue 41 item 5:
frames like "last access time 6 on 1 node(s)" named and outlined nothing, drew no time, and the
next said 4); where a sentence speaks of access times the picture shows them."""

from __future__ import annotations

import pytest

from scenarios.tour import WALKS, run_tour
from viz.scene import tree_scene
from viz.timeline import Timeline
from viz.words import named_nodes


@pytest.mark.parametrize("walk", list(WALKS))
def test_every_frame_names_and_highlights_what_it_changed(walk):
    """Every frame after a step's first line: something highlighted, every highlighted node
    named by its sentence (the root counts as named when the sentence says "root"), every named
    node in the picture; a sentence about access times labels each named node with its own
    time ("t=6") in the scene."""
    tl = Timeline(run_tour(walk).log)
    for step in range(tl.num_steps):
        for k in range(1, tl.num_micro(step) + 1):
            f = tl.frame(step, k)
            where = (walk, step, k, f.narration)
            assert f.highlight, where
            assert set(f.highlight) <= named_nodes(f.narration), where
            assert f.named == set(f.highlight) | f.named and f.named, where
            if "access time" in f.narration:
                scene = tree_scene(f.snapshot, highlight=f.highlight, names=f.labels)
                labels = {n["id"]: n["label"] for n in scene["nodes"]}
                times = {n.id: n.last_access_time for n in f.snapshot.nodes}
                assert all(labels[f"n{i}"].endswith(f"\nt={times[i]:g}") for i in f.named), where


def test_the_split_then_the_walks_older_time_say_why():
    """three_requests, R2's match (step 5): the split (event 1), then #1 stamped t=6 by the
    split's own clock read (event 2), then the walk's t=4 on the root (event 3): the later
    frame's smaller time says it was read when the walk began, before the split's t=6."""
    tl = Timeline(run_tour("three-requests").log)
    two, three = tl.frame(5, 2), tl.frame(5, 3)
    assert two.narration.startswith("#1 gets last access time t=6: the split stamps")
    assert two.highlight == {1: "touched"} and two.labels == {1: "t=6"}
    assert three.narration.startswith("the match's walk writes last access time t=4 to root: "
                                      "the time it read when it began, before the split's t=6")
    assert three.highlight == {0: "touched"} and three.labels == {0: "t=4"}
