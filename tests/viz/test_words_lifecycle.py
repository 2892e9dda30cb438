"""viz/words.py's words on SGLang 0.5.23's request lifecycle: the finish's prompt-boundary
split, the checkpoint after prefill, hits counted once per request, eviction of the shortfall."""

from __future__ import annotations

from radix import events as ev
from radix.request import Req, SlotAllocator
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog
from viz.timeline import Timeline
from viz.trace import step_lines
from viz.words import hit_line, narrate, step_line


def _finished(prompt: list[int], output: list[int]) -> tuple[EventLog, int]:
    """One request finishing in an empty tree; returns the log and its finish step."""
    log = EventLog()
    a = SlotAllocator(64)
    c = RadixCache(allocator=a, sink=log)
    r = Req("R1", prompt, output_ids=output, slot_ids=a.alloc(len(prompt) + len(output) - 1))
    c.cache_finished_req(r)
    return log, log.num_steps - 1


def test_finish_narration_says_the_prompt_boundary_split():
    """Prompt [1..5] + output [7, 8]: the row holds 5 + 2 - 1 = 6 slots, so the first insert
    makes one leaf of 6 tokens; the prompt's re-insert (priority 0 + 1) splits it 5 + 1 at
    token 5, and the words say why (and that the seed chapter kept one leaf)."""
    log, step = _finished([1, 2, 3, 4, 5], [7, 8])
    lines = step_lines(log, step)
    split = [ln for ln in lines if "prompt boundary" in ln]
    assert len(split) == 1, lines
    assert "token 5: 5 prompt + 1 output token " in split[0]
    assert "priority + 1" in split[0] and "seed chapter" in split[0]
    tl = Timeline(log)
    frames = [tl.frame(step, k).narration for k in range(1, tl.num_micro(step) + 1)]
    assert sum("prompt boundary" in f for f in frames) == 1


def test_a_split_leaving_a_cached_path_is_not_the_prompt_boundary():
    """[1, 2, 3] cached, then [1, 2, 9] + output [4] finishes: its first insert splits node 1
    at token 2 (leaving the cached path), then the prompt re-insert splits its new leaf [9, 4]
    at the prompt boundary (token 3). Only the second is told as the prompt boundary."""
    log = EventLog()
    a = SlotAllocator(64)
    c = RadixCache(allocator=a, sink=log)
    c.insert([1, 2, 3], a.alloc(3))
    r = Req("R2", [1, 2, 9], output_ids=[4, 5], slot_ids=a.alloc(4))
    c.cache_finished_req(r)
    lines = step_lines(log, log.num_steps - 1)
    splits = [ln for ln in lines if "splits" in ln]
    assert len(splits) == 2
    assert "leaves the cached path at token 2" in splits[0]
    assert "prompt boundary, token 3" in splits[1]


def test_checkpoint_insert_and_hit_counting_words():
    """A checkpoint's new leaf says 0.5.23 caches the prompt after prefill; a HitCounted that
    skips the first 2 of 3 nodes counts 1 and says why; an evict step says shortfall."""
    leaf = ev.NodeInserted(3, 0, (1, 2), (0, 1), 0, 0.0)
    assert "right after its prefill" in narrate(leaf, None, {}, "R1", op="checkpoint")
    assert "prefill" not in narrate(leaf, None, {}, "R1", op="insert")
    line = hit_line(ev.HitCounted((4, 7, 9), 0, True, 2))
    assert line.startswith("hit_count +1 on 1 of 3 node(s)") and "once" in line
    assert "no hit counted" in hit_line(ev.HitCounted((4,), 0, False, 1))
    assert "shortfall" in step_line(ev.StepStarted(9, "evict", None, "2 tokens"))
    assert "shortfall" not in step_line(ev.StepStarted(9, "insert", None, ""))
