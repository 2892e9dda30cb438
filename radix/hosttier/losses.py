"""Where a host-tier miss went: the tokens of a prompt that an earlier request had cached but
that are on neither tier now, and the removal that took the first of them.

`LossTracker` hears a replay's events (replay.py, one request at a time). Every live node's
place is kept as (the request whose sequence made it, start, end): an insert walks that
request's own sequence, so its prefix up to `end` is the node's path, and a split cuts the
range. Every sequence served is recorded in a PrefixTrie (radix/tokens/runs.py); a removal
(HostLeafEvicted, DeviceLeafDropped) marks the trie along its node's path, as the tree
explainer marks evictions (radix/runs/probe.py). Leaves out: namespaces (the replay runs
token ids alone) and rejected requests (never cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radix import events as ev
from radix.tokens.runs import PrefixTrie

CAUSES = {"host": "evicted from host", "write_through_unbacked": "dropped (never backed up)",
          "host_pressure": "dropped (host full)"}


class Loss(NamedTuple):
    """The removal that last took a prompt's first lost unit from both tiers."""

    by_rid: str  # the request being served then
    by_index: int  # its place in the trace
    cause: str  # a CAUSES value
    node_tokens: int  # units the removed node held


class LossTracker:
    """Node places, the trie of served sequences and its removal marks.

    >>> t = LossTracker([[1, 2, 3, 4], [1, 2, 3, 9]], [4, 4], ["a", "b"])
    >>> t.apply(ev.NodeInserted(1, 0, (1, 2, 3, 4), (0, 1, 2, 3), 0, 1.0), 0); t.served(0)
    >>> t.apply(ev.DeviceLeafDropped(1, 0, 4, "write_through_unbacked"), 1)
    >>> t.lost(1, 0, [])
    (3, Loss(by_rid='b', by_index=1, cause='dropped (never backed up)', node_tokens=4))
    """

    def __init__(self, seqs: Sequence[Sequence[int]], prompt_lens: Sequence[int],
                 rids: Sequence[str]) -> None:
        self.seqs, self.prompt_lens, self.rids = seqs, prompt_lens, rids  # per request, units
        self.place: dict[int, tuple[int, int, int]] = {0: (-1, 0, 0)}  # node -> (req, lo, hi)
        self.trie = PrefixTrie()

    def apply(self, e: ev.Event, index: int) -> None:
        """One event heard while request `index` was being served."""
        if isinstance(e, ev.NodeInserted):
            lo = self.place[e.parent_id][2]
            self.place[e.node_id] = (index, lo, lo + len(e.token_ids))
        elif isinstance(e, ev.NodeSplit):
            k, lo, hi = self.place[e.node_id]
            self.place[e.new_node_id] = (k, lo, lo + e.split_len)
            self.place[e.node_id] = (k, lo + e.split_len, hi)
        elif isinstance(e, ev.HostLeafEvicted | ev.DeviceLeafDropped):
            k, lo, hi = self.place.pop(e.node_id)
            cause = CAUSES[getattr(e, "reason", "host")]
            mark = Loss(self.rids[index], index, cause, hi - lo)
            for tnode, a, b in self.trie.insert(self.seqs[k], None, hi).pieces:
                if b > lo:
                    tnode.add_mark(max(a, lo), b, mark)

    def span(self, node_id: int) -> tuple[int, int]:
        """A live node's [start, end) along its path."""
        return self.place[node_id][1:]

    def num_units(self, node_id: int) -> int:
        lo, hi = self.span(node_id)
        return hi - lo

    def served(self, index: int) -> None:
        """Request `index` cached its whole sequence."""
        seq = self.seqs[index]
        self.trie.insert(seq, None, len(seq))

    def lost(self, index: int, hit: int, restored: Sequence[tuple[int, int]]
             ) -> tuple[int, Loss | None]:
        """(units of the prompt past `hit` an earlier request cached that are on neither tier
        now, the removal that took the first of them). The prompt's last unit is left out (a
        match never reaches it); `restored` spans were on the host, recomputed (not lost)."""
        prompt = self.seqs[index][:self.prompt_lens[index]]
        known = self.trie.walk(prompt, None, max(len(prompt) - 1, 0))
        spans = sorted((max(a, hit), min(b, known.pos)) for a, b in restored)
        spans = [(a, b) for a, b in spans if a < b]
        num = known.pos - hit - sum(b - a for a, b in spans)
        if num <= 0:
            return 0, None
        pos = hit
        for a, b in spans:  # the first unit past the hit that no restored span covers
            if a <= pos < b:
                pos = b
        node = next(t for t, a, b in known.pieces if a <= pos < b)
        mark = next((m for a, b, m in reversed(node.marks) if a <= pos < b), None)
        return num, mark
