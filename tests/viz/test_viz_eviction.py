"""viz/eviction.py: the lab's frames and pictures, and a sweep that holds every sentence it says
to the state of the frame it describes."""

from __future__ import annotations

import re

import pytest

from scenarios.eviction import DESIGN_QUESTION, LabState, run_block_eviction, run_eviction
from viz.eviction import (
    MAX_DRAWN,
    block_short_line,
    collapsed_scene,
    describe,
    drawn_conversations,
    lab_frame,
    num_frames,
)
from viz.timeline import Timeline


def test_frames_design_question():
    """All 400 live. Frames: before, pick, pop, after = 4. Narration and counters at each."""
    run = run_eviction("lru", state=DESIGN_QUESTION)
    tl = Timeline(run.log)
    assert num_frames(run) == 4
    frames = [lab_frame(run, tl, k) for k in range(4)]
    assert frames[0].line == ("evict(300) under lru: 1 evictable leaf; system prompt S (r=400: "
                              "400 live conversation(s) below it) is locked. First in policy "
                              "order: RAG context.")
    assert frames[1].line == ("lru picks RAG context (#1): least recently used first (the "
                              "oldest last access)")
    assert frames[2].line.startswith("pops RAG context (#1, 2,112 tokens")
    assert frames[2].line.endswith("2,112 of 300 freed")
    assert frames[3].line == ("done: 2,112 tokens freed for 300 asked; overshoot 1,812 (whole "
                              "leaves go). system prompt S stays.")
    assert [f.freed for f in frames] == [0, 0, 2_112, 2_112]
    assert (frames[0].evictable, frames[3].evictable, frames[3].protected) == (2_112, 0, 10_112)
    # the pop frame still draws the leaf, but counts it as freed, not evictable (#24 item 9)
    assert [f.evictable for f in frames] == [2_112, 2_112, 0, 0]
    popped = {n["id"]: n for n in frames[2].scene["nodes"]}
    assert popped["n1"]["role"] == "evicted" and popped["n1"]["stroke"] == "#d62728"
    assert "n1" not in {n["id"] for n in frames[3].scene["nodes"]}


@pytest.mark.parametrize("policy", ["lru", "mru"])
def test_freed_plus_evictable_is_the_start_on_every_frame(policy):
    """Default state (2,496 evictable tokens: RAG 2,112 + 16 finished x 24), evict(300): on
    every frame, freed so far + evictable = 2,496 (the pop frame showed 2,112 + 2,496 under
    lru, 24 + 2,496 under mru, the popped leaf counted twice). mru says why in plain words."""
    run = run_eviction(policy)
    tl = Timeline(run.log)
    frames = [lab_frame(run, tl, k) for k in range(num_frames(run))]
    assert {f.freed + f.evictable for f in frames} == {2_496}
    if policy == "mru":
        assert "most recently used first (the newest last access" in frames[1].line


def test_collapsed_picture_counts_all_400():
    """8 conversations drawn (ids 3..10); the summary stands for 392 live ones, 392 x 24 =
    9,408 tokens; S reads r=400 and is named; 12 boxes (root, S, RAG, 8 conversations, the
    summary "m2" under S)."""
    run = run_eviction(state=DESIGN_QUESTION)
    drawn = drawn_conversations(run)
    assert drawn == list(range(3, 3 + MAX_DRAWN))
    scene = collapsed_scene(run, run.log.snapshot_at(run.evict_step), {}, drawn)
    nodes = {n["id"]: n for n in scene["nodes"]}
    assert len(nodes) == 12 and nodes["m2"]["label"] == "+392 more\n392 locked"
    assert nodes["n2"]["label"] == "#2  r=400\nsystem prompt S"
    em2 = next(e for e in scene["edges"] if e["id"] == "em2")
    assert (em2["source"], em2["label"]) == ("n2", "9,408 tok")
    assert any("'RAG context…'" in e["label"] for e in scene["edges"])


def test_drawn_prefers_popped_then_mixes_finished_and_live():
    """396 live, MRU: conv-003..000 are finished and all popped first (ids 6, 5, 4, 3), then
    live ones fill the picture (ids 7..10)."""
    run = run_eviction("mru", state=LabState(396, 1, 0))
    assert drawn_conversations(run) == [6, 5, 4, 3, 7, 8, 9, 10]


def test_describe():
    assert describe([]) == "nothing"
    assert describe([(5, "conv-002", 24), (4, "conv-001", 24), (1, "RAG context", 2112)]) == (
        "conv-002 … conv-001 (2 x 24), then RAG context (2,112)")


def _n(text: str) -> int:
    return int(text.replace(",", ""))


def _check(run, frame) -> None:
    """Every claim of the frame's sentence against the frame's own snapshot."""
    line, snap = frame.line, frame.snapshot
    by_id = snap.by_id()
    s = by_id.get(run.system_id)
    if m := re.search(r": ([\d,]+) evictable (leaf|leaves);", line):
        assert _n(m[1]) == sum(1 for n in snap.nodes if n.evictable_leaf), line
    if m := re.search(r"S \(r=(\d+): ([\d,]+) live", line):
        assert s.lock_ref == int(m[1]) == _n(m[2]) > 0, line
    if m := re.search(r"S \(r=0, but ([\d,]+) cached child", line):
        assert s.lock_ref == 0 and len(s.child_ids) == _n(m[1]) > 0, line
    if m := re.search(r"First in policy order: (.+)\.$", line):
        assert m[1] == (run.candidates[0].name if run.candidates else "nothing")
    if m := re.search(r"^pops .+ \(#(\d+), ([\d,]+) tokens.*: ([\d,]+) of", line):
        node = by_id[int(m[1])]  # still drawn, in red, on the frame that pops it
        assert len(node.token_ids) == _n(m[2]) and frame.freed == _n(m[3]), line
    if m := re.search(r"picks .+ \(#(\d+)\)", line):
        assert int(m[1]) in by_id, line
    if m := re.search(r"\(#(\d+)\) lost its last child and has r=0", line):
        node = by_id[int(m[1])]
        assert node.lock_ref == 0 and not node.child_ids, line
    if m := re.search(r"only ([\d,]+) tokens freed for ([\d,]+) asked, ([\d,]+) short", line):
        assert _n(m[1]) == run.num_evicted and _n(m[2]) - _n(m[1]) == _n(m[3]) > 0, line
        assert snap.evictable_size == 0, line  # evict stops only when nothing is left to pop
    if m := re.search(r"the other ([\d,]+) cached tokens are locked by live requests", line):
        assert snap.protected_size == _n(m[1]) > 0, line
    if "the tree is empty now" in line:
        assert snap.total_size == 0, line
    if m := re.search(r"overshoot ([\d,]+)", line):
        assert _n(m[1]) == run.num_evicted - run.to_free >= 0, line
    if "S stays" in line:
        assert s is not None, line
    if "S was evicted" in line:
        assert s is None, line


@pytest.mark.parametrize("policy", ["lru", "mru", "lfu", "slru"])
@pytest.mark.parametrize("live", [0, 16, 400])
@pytest.mark.parametrize("reads", [1, 2])
def test_every_sentence_is_true_of_its_frame(policy, live, reads):
    """The sweep: settings from nothing live to all live, the RAG leaf read once or twice,
    asking 300 to 20,000 tokens; the first 20 frames and the last 3 of each run are checked,
    and the block side's sentence (asking more than the pool) against what runs."""
    state = LabState(live, reads, 1 if reads == 2 else 0)
    for to_free in (300, 20_000):
        run = run_eviction(policy, 2, state, to_free)
        tl = Timeline(run.log)
        n = num_frames(run)
        for k in sorted(set(range(min(n, 20))) | set(range(max(0, n - 3), n))):
            _check(run, lab_frame(run, tl, k))
    blk = run_block_eviction(state, 100_000)
    line = block_short_line(blk)
    assert ("preempt a running request" in line) == (blk.num_running > 0), line
    assert ("nothing runs" in line) == (blk.num_running == 0), line


def test_the_check_catches_a_false_sentence():
    """The sweep can fail: frame 0 of the design question claiming r=399 is caught, as is an
    end line claiming an empty tree while 10,112 tokens are still locked."""
    run = run_eviction("lru", state=DESIGN_QUESTION, to_free=5_000)
    tl = Timeline(run.log)
    first = lab_frame(run, tl, 0)
    with pytest.raises(AssertionError):
        _check(run, first._replace(line=first.line.replace("r=400: 400", "r=399: 399")))
    last = lab_frame(run, tl, num_frames(run) - 1)
    _check(run, last)
    with pytest.raises(AssertionError):
        _check(run, last._replace(line=last.line + " the tree is empty now"))
