"""The host tier walk: three requests through SGLang 0.5.23's HiCache (radix/hosttier), one
step each, for the Eviction lab.

Device 8 tokens, host 17 (8 x 2, + 1 padding page: --hicache-ratio 2), write-through, LRU, a
load-back threshold of 1 token (SGLang's is 10; the walk's prompts are 6 tokens):
    1. chat A (6 tokens) is computed and backed up at once (write-through);
    2. chat B (6 tokens) needs 6 slots, 2 are free: A is demoted to host, not lost;
    3. chat A returns: 5 of its tokens are found on host and loaded back (B is demoted to make
       room); its last token is computed.
`run_frames` plays the same walk one tier event at a time for the Tour (its "host-tier" walk):
the tree after each event, rebuilt from the events alone (TierModel), with the nodes it moved.
Leaves out: drawing and words (viz/hosttier.py).
"""

from __future__ import annotations

from typing import NamedTuple

from radix import events as ev
from radix.hosttier import HostTierCache, host_token_capacity
from radix.hosttier.requests import Served, serve_request
from radix.hosttier.tiermodel import TierModel
from radix.request import SlotAllocator

DEVICE = 8
RATIO = 2.0
TOUR_WALK = "host-tier"  # the Tour's name for the walk (beside scenarios/tour.py's WALKS)
TOUR_TITLE = "Tour: the host tier demotes, then loads back"
TOUR_ABOUT = (f"SGLang 0.5.23 with HiCache: a device of {DEVICE} tokens, a host pool of twice "
              "that (+1 padding page), write-through. Chat A is backed up, demoted to host when "
              "chat B needs its slots, and loaded back when A returns.")
# the events a frame shows (locks and matches move nothing between tiers)
MOVES = (ev.NodeInserted, ev.NodeSplit, ev.KVBackedUp, ev.NodeDemoted, ev.KVLoadedBack,
         ev.DeviceRestored, ev.DeviceLeafDropped, ev.HostLeafEvicted, ev.HostCopyReclaimed)
CHATS = (("chat A", list(range(1, 7))), ("chat B", list(range(7, 13))),
         ("chat A again", list(range(1, 7))))


class TierNode(NamedTuple):
    id: int
    parent: int | None
    tokens: tuple[int, ...]
    tier: str  # "device", "both", "host" ("root" for the root)


class TierStep(NamedTuple):
    title: str
    served: Served
    events: list[ev.Event]  # the tier and tree events of this request, in order
    nodes: list[TierNode]  # the tree after it
    device_free: int
    host_used: int


def _nodes(cache: HostTierCache) -> list[TierNode]:
    out = []
    for n in sorted(cache.nodes(), key=lambda n: n.id):
        tier = "root" if n.parent is None else n.tier
        out.append(TierNode(n.id, None if n.parent is None else n.parent.id,
                            tuple(n.key.token_ids), tier))
    return out


def run_walk() -> list[TierStep]:
    """The three steps; hits per step: (0, 0, 6), (0, 0, 6), (0, 5, 1)."""
    sink = ev.ListSink()
    host = host_token_capacity(DEVICE, RATIO)
    cache = HostTierCache(SlotAllocator(DEVICE), host, sink=sink, load_back_threshold=1)
    steps = []
    for title, prompt in CHATS:
        sink.events.clear()
        served = serve_request(cache, prompt)
        kept = [e for e in sink.events if not isinstance(e, ev.HostLockChanged)]
        steps.append(TierStep(title, served, kept, _nodes(cache),
                              cache.allocator.available_size(), cache.host.num_used))
    return steps


class TierFrame(NamedTuple):
    request: int  # index into run_walk()'s steps; -1: before the first request
    event: ev.Event | None  # the move this frame shows (None: the empty cache)
    nodes: list[TierNode]  # the tree after it, root first
    moved: tuple[int, ...]  # the node ids the event touched


def _moved(e: ev.Event) -> tuple[int, ...]:
    if isinstance(e, ev.KVLoadedBack):
        return tuple(e.node_ids)
    if isinstance(e, ev.NodeSplit):
        return (e.new_node_id, e.node_id)
    return (e.node_id,)


def _tier(device: bool, host: bool) -> str:
    return "both" if device and host else "device" if device else "host"


class _Shapes:
    """The tree's tokens and tiers, from the events alone (TierModel keeps the residency)."""

    def __init__(self) -> None:
        self.model, self.tokens = TierModel(), {}

    def apply(self, e: ev.Event) -> None:
        self.model.apply(e)
        if isinstance(e, ev.NodeInserted):
            self.tokens[e.node_id] = tuple(e.token_ids)
        elif isinstance(e, ev.NodeSplit):
            old, cut = self.tokens[e.node_id], e.split_len
            self.tokens[e.new_node_id], self.tokens[e.node_id] = old[:cut], old[cut:]

    def nodes(self) -> list[TierNode]:
        out = [TierNode(0, None, (), "root")]
        for i, r in sorted(self.model.nodes.items()):
            out.append(TierNode(i, r.parent, self.tokens[i], _tier(r.device, r.host)))
        return out


def run_frames() -> list[TierFrame]:
    """The empty cache, then one frame per move of run_walk's requests, in order."""
    shapes = _Shapes()
    frames = [TierFrame(-1, None, shapes.nodes(), ())]
    for k, step in enumerate(run_walk()):
        for e in step.events:
            if isinstance(e, MOVES):
                shapes.apply(e)
                frames.append(TierFrame(k, e, shapes.nodes(), _moved(e)))
    return frames
