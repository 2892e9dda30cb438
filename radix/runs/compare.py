"""One trace through the radix tree and the block cache, one request at a time (`compare`).

Both get the same capacity in tokens (the tree a SlotAllocator of that many slots, evicting when
an allocation fails; the block pool capacity // block_size blocks plus the null block) and see
the requests one at a time in arrival order: look up, prefill the rest of the prompt, decode
output_len tokens (the last one's KV is never computed, as in SGLang and vLLM), finish. Both cap
the lookup at prompt_len - 1 tokens. Leaves out: batching and scheduling (see `simulate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from radix.allocator import SlotAllocator
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import EventSink
from radix.request import Req
from radix.traces.base import Trace
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

OUTPUT_BASE = 1 << 40  # synthetic output tokens: OUTPUT_BASE + (request index << 20) + j


def trace_reqs(trace: Trace) -> list[Req]:
    """Fresh Reqs in real tokens (a Mooncake unit token u becomes u*512 .. u*512+511).

    >>> from radix.traces.base import TraceRequest
    >>> t = Trace("request", [TraceRequest("a", 0, (5, 6), 1)])
    >>> [r.origin_input_ids for r in trace_reqs(t)]
    [[5, 6]]
    """
    reqs = []
    for i, tr in enumerate(trace.requests):
        tokens = list(tr.token_ids)
        if trace.token_scale > 1:  # Mooncake: one hash id stands for token_scale real tokens
            s = trace.token_scale
            tokens = [u * s + k for u in tokens for k in range(s)][:trace.input_lens[i]]
        reqs.append(Req(tr.rid, tokens, max_new_tokens=tr.output_len, extra_key=tr.extra_key,
                        cache_salt=tr.cache_salt, priority=tr.priority, arrival=tr.arrival))
    return reqs


def output_tokens(trace: Trace, index: int) -> list[int]:
    """The reply of request `index`: the trace's own when recorded, else unique synthetic ids."""
    tr = trace.requests[index]
    if tr.output_ids:
        return list(tr.output_ids[:tr.output_len])
    return [OUTPUT_BASE + (index << 20) + j for j in range(tr.output_len)]


def _stats(name: str) -> dict[str, Any]:
    return {"cache": name, "requests": 0, "rejected": 0, "prompt_tokens": 0, "hit_tokens": 0,
            "prefilled_tokens": 0, "evicted_tokens": 0, "evictions": 0,
            "unreachable_blocks": None}


def _finish(s: dict[str, Any]) -> dict[str, Any]:
    s["hit_rate"] = round(s["hit_tokens"] / s["prompt_tokens"], 4) if s["prompt_tokens"] else 0.0
    return s


def run_tree(reqs: Sequence[Req], outputs: Sequence[list[int]], capacity: int,
             page_size: int, *, sink: EventSink | None = None,
             after_request: Callable[[RadixCache], None] | None = None) -> dict[str, Any]:
    """SGLang's flow: match (capped), lock, alloc (evict on failure), decode, cache_finished_req.

    `sink` receives the tree's events; `after_request(tree)` runs after each request (the Trace
    debugger checks invariants there; an exception it raises stops the run).
    """
    alloc = SlotAllocator(capacity)
    tree = RadixCache(page_size=page_size, allocator=alloc, sink=sink)
    s = _stats("radix tree")

    def take(n: int) -> list[int] | None:
        slots = alloc.alloc(n)
        if slots is None:
            result = tree.evict(n - alloc.available_size())
            s["evicted_tokens"] += result.num_evicted
            s["evictions"] += len(result.evicted_nodes)
            slots = alloc.alloc(n)
        return slots

    for req, out in zip(reqs, outputs):
        prompt = req.origin_input_ids
        key = RadixKey(prompt[:len(prompt) - 1], req.extra_key, req.cache_salt)
        m = tree.match_prefix(key, rid=req.rid)
        tree.inc_lock_ref(m.last_node, rid=req.rid)
        req.last_node, req.prefix_indices = m.last_node, list(m.slot_ids)
        req.cache_protected_len = m.prefix_len
        new = take(len(prompt) - m.prefix_len)
        if new is None:
            tree.dec_lock_ref(m.last_node, rid=req.rid)
            s["rejected"] += 1
            continue
        req.slot_ids = list(m.slot_ids) + new
        _count(s, len(prompt), m.prefix_len)
        for j, tok in enumerate(out):
            req.output_ids.append(tok)
            if j < len(out) - 1:
                slot = take(1)
                if slot is None:
                    break
                req.slot_ids += slot
        tree.cache_finished_req(req)
        if after_request is not None:
            after_request(tree)
    return _finish(s)


def run_blocks(reqs: Sequence[Req], outputs: Sequence[list[int]], capacity: int,
               block_size: int, *, manager: BlockCacheManager | None = None,
               rejected_rids: list[str] | None = None) -> dict[str, Any]:
    """vLLM's flow: get_computed_blocks, allocate_slots for the prompt, one per decode, free.

    Pass `manager` to keep the pool for a look afterwards (it must hold capacity // block_size
    + 1 blocks); `rejected_rids` collects the requests too big to admit.
    """
    if manager is None:
        manager = BlockCacheManager(BlockPool(capacity // block_size + 1, block_size=block_size))
    m, pool = manager, manager.pool
    s = _stats("block cache")
    for req, out in zip(reqs, outputs):
        hit = m.get_computed_blocks(req)
        prompt_len = len(req.origin_input_ids)
        if m.allocate_slots(req, prompt_len - hit.num_computed_tokens, hit) is None:
            m.free(req)
            s["rejected"] += 1
            if rejected_rids is not None:
                rejected_rids.append(req.rid)
            continue
        _count(s, prompt_len, hit.num_computed_tokens)
        for j, tok in enumerate(out):
            req.output_ids.append(tok)
            if j < len(out) - 1 and m.allocate_slots(req, 1) is None:
                break
        m.free(req)
    s["evictions"] = pool.num_evictions
    s["evicted_tokens"] = pool.num_evictions * block_size
    s["unreachable_blocks"] = m.num_unreachable_blocks()
    return _finish(s)


def _count(s: dict[str, Any], prompt_len: int, hit: int) -> None:
    s["requests"] += 1
    s["prompt_tokens"] += prompt_len
    s["hit_tokens"] += hit
    s["prefilled_tokens"] += prompt_len - hit


def compare(trace: Trace, capacity: int, page_size: int = 1, block_size: int = 16) -> dict:
    """Both caches over `trace`; returns {"capacity", "tree": stats, "blocks": stats}."""
    if capacity < 1 or page_size < 1 or block_size < 1:
        raise ValueError("--capacity, --page-size and --block-size must be >= 1")
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    tree = run_tree(trace_reqs(trace), outputs, capacity, page_size)
    # vLLM preallocates every block; a pool past what the whole trace can fill behaves the same
    usable = sum(len(t.token_ids) + len(o) + block_size for t, o in zip(trace.requests, outputs))
    blocks = run_blocks(trace_reqs(trace), outputs, min(capacity, usable), block_size)
    return {"capacity": capacity, "page_size": page_size, "block_size": block_size,
            "tree": tree, "blocks": blocks}
