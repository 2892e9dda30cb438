"""One trace through the radix tree and the block cache, one request at a time (`compare`).
Both get the same capacity in tokens (tree: that many slots, evicting when short; blocks:
capacity // block_size + the null block) and see the requests in arrival order: look up (capped
at prompt_len - 1), prefill the rest, decode output_len tokens (the last one's KV never computed,
decode's slots taken in one go, exactly as token by token), finish. Real tokens throughout;
compact (Mooncake) traces stay compact (a SlotAllocator of runs, the block-extent storage). At
the end, `fewer_collections`: the garbage-collector setting every long run holds (this one,
`simulate`, the cluster, the Trace debugger).
Leaves out: batching and scheduling (see `simulate`).
"""

from __future__ import annotations

import gc
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from radix.blocks.manager import BlockCacheManager, ExtentPool
from radix.blocks.pool import BlockPool
from radix.events import EventSink
from radix.request import Req, SlotAllocator
from radix.tokens import is_compact, joined
from radix.traces.trace import OUTPUT_BASE, Trace, is_compact_trace, output_tokens, trace_reqs
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

__all__ = ["OUTPUT_BASE", "compare", "fewer_collections", "output_tokens", "run_blocks",
           "run_tree", "trace_reqs"]


def _stats(name: str) -> dict[str, Any]:
    return {"cache": name, "requests": 0, "rejected": 0, "prompt_tokens": 0, "hit_tokens": 0,
            "rejected_prompt_tokens": 0, "prefilled_tokens": 0, "evicted_tokens": 0,
            "evictions": 0, "unreachable_blocks": None}


def _finish(s: dict[str, Any]) -> dict[str, Any]:
    """The two hit rates: `hit_rate` over the admitted requests' prompt tokens (SGLang's and
    vLLM's own counters see only those), `hit_rate_all` over every prompt token of the trace,
    the rejected requests' included (what a user of the whole trace gets)."""
    hit, admitted = s["hit_tokens"], s["prompt_tokens"]
    every = admitted + s["rejected_prompt_tokens"]
    s["hit_rate"] = round(hit / admitted, 4) if admitted else 0.0
    s["hit_rate_all"] = round(hit / every, 4) if every else 0.0
    return s


def run_tree(reqs: Iterable[Req], outputs: Sequence[Sequence[int]], capacity: int,
             page_size: int, *, sink: EventSink | None = None,
             after_request: Callable[[RadixCache], None] | None = None,
             tree: RadixCache | None = None,
             on_match: Callable[[Req, int], None] | None = None) -> dict[str, Any]:
    """SGLang's flow: match (capped), lock, alloc (evict on failure), decode, cache_finished_req.

    `sink` receives the tree's events; `after_request(tree)` runs after each request (the Trace
    debugger checks invariants there; an exception it raises stops the run). `tree` may be given
    (built over an allocator of `capacity` slots); `on_match(req, prefix_len)` sees each match.
    """
    reqs = iter(reqs)  # subtle: may be a generator (the Trace debugger streams its requests)
    if tree is None:
        first = next(reqs, None)
        compact = first is not None and is_compact(first.origin_input_ids)
        alloc = SlotAllocator(capacity, runs=compact)
        tree = RadixCache(page_size=page_size, allocator=alloc, sink=sink)
        reqs = itertools.chain(() if first is None else (first,), reqs)
    alloc = tree.allocator
    s = _stats("radix tree")

    def evict(n: int) -> None:
        result = tree.evict(n)
        s["evicted_tokens"] += result.num_evicted
        s["evictions"] += len(result.evicted_nodes)

    for req, out in zip(reqs, outputs):
        prompt = req.origin_input_ids
        key = RadixKey(prompt[:len(prompt) - 1], req.extra_key, req.cache_salt)
        m = tree.match_prefix(key, rid=req.rid)
        if on_match is not None:
            on_match(req, m.prefix_len)
        tree.inc_lock_ref(m.last_node, rid=req.rid)
        prefix = m.slot_ids  # joined on each read: read once
        req.last_node, req.prefix_indices = m.last_node, prefix
        req.cache_protected_len = m.prefix_len
        new = _take(alloc, len(prompt) - m.prefix_len, evict)
        if new is None:
            tree.dec_lock_ref(m.last_node, rid=req.rid)
            s["rejected"] += 1
            s["rejected_prompt_tokens"] += len(prompt)
            continue
        req.slot_ids = joined(prefix, new)
        _count(s, len(prompt), m.prefix_len)
        num = _decode_slots(tree, req, len(out) - 1, evict)
        req.output_ids.extend(out[:min(len(out), num + 1)])
        tree.cache_finished_req(req)
        if after_request is not None:
            after_request(tree)
    return _finish(s)


def _take(alloc: Any, need: int, evict: Callable[[int], None]) -> Any:
    """`need` slots, evicting the shortfall first when too few are free; None if still short."""
    if alloc.available_size() < need:
        evict(need - alloc.available_size())
    return alloc.alloc(need)


def _decode_slots(tree: RadixCache, req: Req, num: int, evict: Callable[[int], None]) -> int:
    """Slots for up to `num` decode tokens, exactly as one take(1) per token: whenever none is
    free, evict(1) (a whole leaf); stop when nothing is left to evict. Returns slots taken."""
    alloc, got = tree.allocator, 0
    while got < num:
        if alloc.available_size() == 0:
            evict(1)
            if alloc.available_size() == 0:
                break
        k = min(alloc.available_size(), num - got)
        req.slot_ids += alloc.alloc(k)
        got += k
    return got


def run_blocks(reqs: Sequence[Req], outputs: Sequence[Sequence[int]], capacity: int,
               block_size: int, *, manager: BlockCacheManager | None = None,
               rejected_rids: list[str] | None = None,
               on_lookup: Callable[[Req, Any], None] | None = None) -> dict[str, Any]:
    """vLLM's flow: get_computed_blocks, allocate_slots for the prompt, the decode tokens, free.

    Pass `manager` to keep the pool for a look afterwards (it must hold capacity // block_size
    + 1 blocks); compact requests get an ExtentPool by default, others a BlockPool. `rejected_rids`
    collects the requests too big to admit; `on_lookup(req, hit)` sees each lookup.
    """
    if manager is None:
        # vLLM preallocates every block; a pool past what the whole trace can fill behaves the
        # same (prompt + output + a block per request), and costs the per-block pool nothing
        usable = sum(len(r.origin_input_ids) + len(o) + block_size for r, o in zip(reqs, outputs))
        num_blocks = min(capacity, usable) // block_size + 1
        compact = bool(reqs) and is_compact(reqs[0].origin_input_ids)
        manager = BlockCacheManager(ExtentPool(num_blocks, block_size) if compact
                                    else BlockPool(num_blocks, block_size=block_size))
    m = manager
    s = _stats("block cache")
    for req, out in zip(reqs, outputs):
        hit = m.get_computed_blocks(req)
        if on_lookup is not None:
            on_lookup(req, hit)
        prompt_len = len(req.origin_input_ids)
        if m.allocate_slots(req, prompt_len - hit.num_computed_tokens, hit) is None:
            m.free(req)
            s["rejected"] += 1
            s["rejected_prompt_tokens"] += prompt_len
            if rejected_rids is not None:
                rejected_rids.append(req.rid)
            continue
        _count(s, prompt_len, hit.num_computed_tokens)
        num = decode_tokens(req, out, -(-prompt_len // block_size), m.num_free_blocks,
                            block_size)
        if num:
            m.allocate_slots(req, num)
        m.free(req)
    s["evictions"] = m.num_evictions
    s["unreachable_blocks"] = m.num_unreachable_blocks()
    s["evicted_tokens"] = s["evictions"] * block_size
    return _finish(s)


def decode_tokens(req: Req, out: Sequence[int], held: int, free: int, block_size: int) -> int:
    """run_blocks' decode step, as one allocate_slots per token would run it: that fails at the
    first block the pool cannot give, so the tokens run fit in the `held` blocks plus the `free`
    ones (nothing is freed in between). Appends to `req.output_ids` the tokens of `out` run and
    the one after them (appended before the failure, kept); returns how many were run, the slots
    to allocate (0: none).

    >>> r = Req("a", [1, 2, 3])
    >>> decode_tokens(r, [7, 8, 9, 10, 11], held=1, free=1, block_size=4), r.output_ids
    (4, [7, 8, 9, 10, 11])
    """
    prompt_len = len(req.origin_input_ids)
    num = max(0, min(len(out) - 1, (held + free) * block_size - prompt_len))
    req.output_ids.extend(out[:min(len(out), num + 1)])
    return num


def _count(s: dict[str, Any], prompt_len: int, hit: int) -> None:
    s["requests"] += 1
    s["prompt_tokens"] += prompt_len
    s["hit_tokens"] += hit
    s["prefilled_tokens"] += prompt_len - hit


def compare(trace: Trace, capacity: int | None = None, page_size: int = 1,
            block_size: int = 16) -> dict:
    """Both caches over `trace`; returns {"capacity", "page_size", "block_size", "tree": stats,
    "blocks": stats}, all in real tokens (a Mooncake trace too). `capacity` None: unbounded,
    room for every prompt and output token of the trace and a page each (nothing evicted).

    >>> from radix.traces.trace import TraceRequest
    >>> t = Trace("request", [TraceRequest(r, 0, tuple(range(40)), 2) for r in "ab"])
    >>> out = compare(t, 1000, block_size=16)
    >>> out["tree"]["hit_tokens"], out["blocks"]["hit_tokens"]
    (39, 32)
    """
    if (capacity is not None and capacity < 1) or page_size < 1 or block_size < 1:
        raise ValueError("--capacity, --page-size and --block-size must be >= 1")
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    room = capacity
    if room is None:  # never full: nothing is evicted, nothing rejected
        page = max(page_size, block_size)
        room = sum(n + len(o) + page for n, o in zip(trace.input_lens, outputs)) + 1
    with fewer_collections():
        tree = run_tree(trace_reqs(trace), outputs, room, page_size)
        blocks = run_blocks(trace_reqs(trace), outputs, room, block_size)
    return {"capacity": capacity, "page_size": page_size, "block_size": block_size,
            "compact": is_compact_trace(trace), "tree": tree, "blocks": blocks}

# ---------------------------------------------------------------- fewer cyclic collections
# A run over a production trace allocates millions of short-lived objects (keys, slices, events)
# beside a big heap that lives for the whole run (the trace's requests, the tree, the block
# pool). With CPython's default first threshold (700 allocations) the collector rescans that
# heap again and again: 40% of a simulated run on the conversation stand-in. fewer_collections
# raises the first threshold while at least one run is inside it (runs in threads share the
# setting; the first in saves it, the last out restores it). Collections still happen, less
# often; cycles are still freed.

RUN_THRESHOLD = 50_000  # allocations between first-generation collections during a run

_lock = threading.Lock()
_inside = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def fewer_collections(threshold: int = RUN_THRESHOLD) -> Iterator[None]:
    """Raises gc's first threshold to `threshold` (never lowers it) for the block.

    >>> before = gc.get_threshold()
    >>> with fewer_collections(12_345):
    ...     gc.get_threshold()[0] >= 12_345
    True
    >>> gc.get_threshold() == before
    True
    """
    global _inside, _saved
    with _lock:
        if _inside == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(_saved[0], threshold), *_saved[1:])
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
