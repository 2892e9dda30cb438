"""Words for the tree's flavor (radix/tree/unified.py): which SGLang class a page's tree
follows, and the one thing the unified class does differently on a full-attention model, said
where a split happens. Follows SGLang 0.5.23 (UnifiedRadixCache, its default, vs RadixCache);
leaves out the components the model leaves out (SWA, Mamba, sessions, the host tier).
"""

from __future__ import annotations

from radix import events as ev

CLASSES = {"unified": "SGLang 0.5.23's UnifiedRadixCache, the class it serves from by default",
           "classic": "SGLang's classic RadixCache (mem_cache/radix_cache.py)"}


def flavor_line(flavor: str) -> str:
    """A page's caption: which class its tree follows, and where the two differ.

    >>> flavor_line("classic").startswith("Tree flavor: classic (SGLang's classic RadixCache")
    True
    """
    if flavor not in CLASSES:
        raise ValueError(f"flavor: {flavor!r} is not one of {', '.join(CLASSES)}")
    return (f"Tree flavor: {flavor} ({CLASSES[flavor]}). The flavors differ in one thing on "
            "this model: after a split, the unified cache's new prefix node keeps its child's "
            "creation time (the classic one stamps it now, younger than its child), which can "
            "change what FIFO and FILO evict.")


def split_time_note(e: ev.NodeSplit) -> str:
    """The unified flavor's split, in words ('' for the classic flavor's, whose new node reads
    the clock: e.creation_time is None there).

    >>> split_time_note(ev.NodeSplit(1, 3, 0, 2, 5.0, 1.0))[:50]
    ". Unified: the new prefix #3 keeps #1's creation t"
    >>> split_time_note(ev.NodeSplit(1, 3, 0, 2, 5.0))
    ''
    """
    if e.creation_time is None:
        return ""
    # short: the Tour's alert must stay on two lines at 1280x800 (its numbers row in view)
    return (f". Unified: the new prefix #{e.new_node_id} keeps #{e.node_id}'s creation time "
            f"t={e.creation_time:g} (the classic RadixCache would stamp it t={e.time:g}, "
            f"younger than #{e.node_id}), so FIFO and FILO see it as old as its path")
