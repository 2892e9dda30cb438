"""The host tier walk: three requests through SGLang 0.5.23's HiCache (radix/hosttier), one
step each, for the Eviction lab.

Device 8 tokens, host 17 (8 x 2, + 1 padding page: --hicache-ratio 2), write-through, LRU, a
load-back threshold of 1 token (SGLang's is 10; the walk's prompts are 6 tokens):
    1. chat A (6 tokens) is computed and backed up at once (write-through);
    2. chat B (6 tokens) needs 6 slots, 2 are free: A is demoted to host, not lost;
    3. chat A returns: 5 of its tokens are found on host and loaded back (B is demoted to make
       room); its last token is computed.
Leaves out: drawing and words (viz/hosttier.py).
"""

from __future__ import annotations

from typing import NamedTuple

from radix import events as ev
from radix.allocator import SlotAllocator
from radix.hosttier import HostTierCache, host_token_capacity
from radix.hosttier.requests import Served, serve_request

DEVICE = 8
RATIO = 2.0
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
