"""Decode fast-forward: a run of decode steps in which nothing but decoding can happen, at once.

Between two events (arrival, finish, eviction, retraction, block-shadow drop) a batch only
decodes: a token and a slot per request a step, the new-token ratio decays, the clock moves by
the priced step. `span_length` counts such steps, `apply_span` does them at once with the same
tokens, slot counts, shadow blocks, ratio and clock (priced step by step) as the one-step loop
(a test holds them equal; slot ids, mere names, differ).
Leaves out: real models (the engine steps one by one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from radix.sched.admission import grow_in_place


def span_length(sched: Any, until: float) -> int:
    """How many decode steps may go at once: up to the first finish (none before the last
    step), while every step's slots are free without evicting (so no eviction and no
    retraction), while the block shadow never runs short (no request dropped), and up to the
    first step that ends at or past `until` (counted and priced by the runner). 0: take one
    ordinary step instead (it may evict, retract or drop)."""
    runner = sched.runner
    if not hasattr(runner, "decode_span"):
        return 0
    reqs = sched.running
    k = min(r.max_new_tokens - len(r.output_ids) for r in reqs)
    # a step needs one slot per request (a page each at most): none is evicted while that many
    # stay free (conservative for paged allocators too)
    k = min(k, sched.allocator.available_size() // (len(reqs) * sched.tree_cache.page_size))
    if sched.shadow is not None and k > 1:
        k = sched.shadow.decode_room(reqs, k)
    if k <= 1:
        return 0
    return runner.decode_span(reqs, k, until)


def new_units(filled: int, more: int, unit: int) -> int:
    """Units (pages, blocks) that `more` tokens open after `filled` tokens.

    >>> new_units(16, 1, 16), new_units(15, 1, 16), new_units(0, 33, 16)
    (1, 0, 3)
    """
    return -(-(filled + more) // unit) - -(-filled // unit)


def most_steps(need: Callable[[int], int], free: int, max_steps: int) -> int:
    """The most decode steps k <= max_steps whose new blocks `need(k)` (growing with k) fit in
    `free`: a binary search.

    >>> most_steps(lambda k: 3 * k, 10, 8)
    3
    """
    lo, hi = 0, max_steps  # need(lo) <= free
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo


def decay_ratio(ratio: float, steps: int, cfg: Any) -> float:
    """The new-token ratio after `steps` decode steps, one float op a step (bit for bit)."""
    for _ in range(steps):
        new = max(ratio - cfg.new_token_ratio_decay, cfg.min_new_token_ratio)
        if new == ratio:
            break
        ratio = new
    return ratio


def apply_span(sched: Any, steps: int) -> None:
    """`steps` decode steps for every running request, priced already (the runner's clock has
    moved): the ratio decays one float op a step (bit for bit), each request gets its tokens,
    slots and shadow blocks. Finishing is the caller's."""
    sched.new_token_ratio = decay_ratio(sched.new_token_ratio, steps, sched.config)
    allocator = sched.allocator
    extend = getattr(allocator, "alloc_extend", None)  # a paged allocator continues its page
    # an allocator of runs continues the row's run in place
    after = allocator.next_after if getattr(allocator, "runs", False) else None
    for req in sched.running:
        req.output_ids.extend(sched.runner.span_tokens(req, steps))
        row = req.slot_ids
        if not grow_in_place(after, row, steps):
            req.slot_ids += (extend(row[-1] if len(row) else None, steps) if extend is not None
                             else allocator.alloc(steps))
        if sched.shadow is not None:
            sched.shadow.on_decode(req, steps)
        req.metrics["decode_tokens"] = req.metrics.get("decode_tokens", 0) + steps

