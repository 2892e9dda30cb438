"""The flavor in words (viz/flavor.py): a split narrated in each flavor, from real caches, and
the caption that names a page's flavor."""

from __future__ import annotations

import pytest

from radix import events as ev
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import TreeModel
from viz.flavor import flavor_line
from viz.words import narrate


def split_line_of(flavor: str) -> str:
    """insert [1 2 3 4]: the walk reads the logical clock (1), the new leaf #1 is made at 2;
    insert [1 2 5]: the walk reads 3, the split's new node #2 is made at 4. Classic: #2 was
    created at 4 (the event's time, creation_time None); unified: #2 keeps #1's 2."""
    sink = ev.ListSink()
    cache = RadixCache(flavor=flavor, sink=sink)
    cache.insert([1, 2, 3, 4])
    before = TreeModel()
    before.apply_all(sink.events)
    start = len(sink.events)
    cache.insert([1, 2, 5])
    split = next(e for e in sink.events[start:] if isinstance(e, ev.NodeSplit))
    assert split.creation_time == (2.0 if flavor == "unified" else None)
    return narrate(split, before, {1: "R1"}, "R2")


def test_the_unified_split_says_the_new_node_keeps_the_childs_creation_time():
    line = split_line_of("unified")
    assert line.startswith("R2 leaves R1 at token 2: node #1 splits into 2 + 2 (new prefix #2)")
    assert ("the new prefix #2 keeps #1's creation time t=2 (the classic RadixCache would "
            "stamp it t=4, younger than #1)") in line
    assert "FIFO and FILO" in line


def test_the_classic_split_says_nothing_about_times():
    line = split_line_of("classic")
    assert line == "R2 leaves R1 at token 2: node #1 splits into 2 + 2 (new prefix #2)"


def test_the_caption_names_the_flavor_and_refuses_an_unknown_one():
    assert flavor_line("unified").startswith("Tree flavor: unified (SGLang 0.5.23's "
                                             "UnifiedRadixCache")
    with pytest.raises(ValueError, match="flavor: 'rust'"):
        flavor_line("rust")
