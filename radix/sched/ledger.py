"""Deferred decode: the running batch's decode steps counted in aggregate, settled per request
only when someone looks.

A decode step gives every running request one token, one slot (a new page when its row fills
one) and, in the block shadow, a new block when its computed tokens fill one. What the rest of
the scheduler reads between steps is aggregate: free slots and blocks, the context the step is
priced on, admission's reservation for the outputs still to come (SGLang's
`min(max_new_tokens - len(output_ids), 4096)` over the running batch), the next finish. So
`DecodeLedger` moves a global step counter and keeps those aggregates (by residue: a request
needs a page at step g iff (last slot + 1 + g - g0) % page == 0, a residue fixed when it joins),
and settles a request (its tokens, slot row, shadow blocks, decode count) when it finishes or
before anything that reads it one by one (retraction, an eviction, a short block pool).

Exact, not an estimate: the free-slot count and the block pool's queue change at each step as
step-by-step decoding changes them (the blocks are popped at the step, in the same number; a
pop reads only the queue's head), and a settled request holds the same ids it would have (a
run allocator grows each row in place; tests/radix/sched/test_ledger.py holds runs with and without
the ledger equal). Only with a run allocator (compact rows), a priced runner and no event sink.
Leaves out: requests decoding at different rates (speculative decoding).
"""

from __future__ import annotations

import heapq
from typing import Any

from radix.request import Req
from radix.sched.admission import CLIP_MAX_NEW_TOKENS, grow_in_place
from radix.sched.span import most_steps, new_units


def hits(residue: int, start: int, steps: int, modulus: int) -> int:
    """How many g in [start, start + steps) have (residue + g) % modulus == 0.

    >>> hits(0, 0, 16, 16), hits(3, 0, 14, 16), hits(3, 0, 13, 16), hits(5, 11, 1, 16)
    (1, 1, 0, 1)
    """
    first = (-residue - start) % modulus
    return 0 if first >= steps else 1 + (steps - 1 - first) // modulus


def hits_sum(hist: list[int], start: int, steps: int) -> int:
    """sum(h * hits(r, start, steps, len(hist)) for r, h in enumerate(hist)): each residue
    has steps // m hits, and one more when its first lies in the first steps % m positions.

    >>> hist = [3, 0, 2, 1]
    >>> [hits_sum(hist, g, k) for g, k in ((0, 1), (1, 6), (5, 4), (2, 0))]
    [3, 9, 6, 0]
    >>> [sum(h * hits(r, g, k, 4) for r, h in enumerate(hist)) for g, k in ((0, 1), (1, 6),
    ...                                                                    (5, 4), (2, 0))]
    [3, 9, 6, 0]
    """
    m = len(hist)
    laps, rem = divmod(steps, m)
    out = laps * sum(hist) if laps else 0
    first = -start % m  # the residue whose hit is at offset 0; offset t: first - t
    for t in range(rem):
        out += hist[(first - t) % m]
    return out


class _Entry:
    __slots__ = ("req", "seq", "g0", "finish", "near", "alive", "fresh", "keys")

    def __init__(self, req: Req, seq: int, g0: int, finish: int, near: bool) -> None:
        self.req, self.seq, self.g0, self.finish, self.near = req, seq, g0, finish, near
        self.alive = True
        self.fresh = False  # its row cannot continue in place: its first token opens a run
        self.keys: tuple[int, int, int | None] = (0, 0, None)  # its histogram buckets


class DecodeLedger:
    """The running batch of one Scheduler, decoded lazily. `join` each request that starts
    decoding, `step(k)` for k decode steps of all of them, `due()` for those that finish at the
    current step (settled), `settle_all()` before reading requests one by one."""

    def __init__(self, sched: Any) -> None:
        self.sched = sched
        self.allocator = sched.allocator
        self.shadow = sched.shadow
        self.page = sched.tree_cache.page_size
        self.block = self.shadow.block_size if self.shadow is not None else 1
        self.now = 0  # decode steps taken since the start (g)
        self._seq = 0
        self._clear()

    def _clear(self) -> None:
        self.entries: dict[int, _Entry] = {}  # id(req) -> its entry
        self._tails: dict[int, _Entry] = {}  # last slot -> the entry whose run ends there
        self._finish: list[tuple[int, int, _Entry]] = []  # (finish step, seq, entry)
        self._far: list[tuple[int, int, _Entry]] = []  # (step it nears, seq, entry)
        self._near_sum = 0  # sum of finish steps of requests with <= CLIP tokens to go
        self._near_count = 0
        self._far_count = 0
        self.context = 0  # slots held by the running rows (the priced context)
        self._slot_hist = [0] * self.page  # by (last slot + 1 - g0) % page: pages opened
        self._len_hist = [0] * self.page  # by (row length - g0) % page: SGLang's estimate
        self._block_hist = [0] * self.block  # by (shadow computed - g0) % block

    # ------------------------------------------------------------------ membership
    def join(self, req: Req) -> None:
        """`req` decodes from now on (its row, outputs and shadow count are up to date)."""
        g, row = self.now, req.slot_ids
        finish = g + req.max_new_tokens - len(req.output_ids)
        near = finish - g <= CLIP_MAX_NEW_TOKENS
        self._seq += 1
        e = _Entry(req, self._seq, g, finish, near)
        self.entries[id(req)] = e
        heapq.heappush(self._finish, (finish, e.seq, e))
        if near:
            self._near_sum += finish
            self._near_count += 1
        else:
            heapq.heappush(self._far, (finish - CLIP_MAX_NEW_TOKENS, e.seq, e))
            self._far_count += 1
        self.context += len(row)
        self._place(e)

    def _place(self, e: _Entry) -> None:
        """Files a settled entry in the histograms (and under its row's tail)."""
        req, g = e.req, self.now
        row = req.slot_ids
        # a row that is not its run's end (its tail deduplicated into another request's
        # slots, or the run's end held by a row ahead of it in the batch, which continues it
        # first) gets a fresh, page-aligned run at its first decode token, as alloc_extend
        holder = self._tails.get(row[-1])
        e.fresh = (holder is not None and holder is not e and holder.alive) or not (
            self.allocator.can_continue(row[-1], e.finish - g))
        if not e.fresh:
            self._tails[row[-1]] = e
        c = self._computed(req)
        e.keys = ((-g if e.fresh else row[-1] + 1 - g) % self.page, (len(row) - g) % self.page,
                  None if c is None else (c - g) % self.block)
        self._count(e.keys, 1)

    def _unplace(self, e: _Entry) -> None:
        self._count(e.keys, -1)
        last = e.req.slot_ids[-1]
        if self._tails.get(last) is e:
            del self._tails[last]

    def _count(self, keys: tuple[int, int, int | None], sign: int) -> None:
        slot, length, block = keys
        self._slot_hist[slot] += sign
        self._len_hist[length] += sign
        if block is not None:
            self._block_hist[block] += sign

    def _computed(self, req: Req) -> int | None:
        return None if self.shadow is None else self.shadow.computed.get(req.rid)

    def _leave(self, e: _Entry) -> None:
        """Drops a settled entry from every aggregate."""
        req = e.req
        del self.entries[id(req)]
        e.alive = False
        if e.near:
            self._near_sum -= e.finish
            self._near_count -= 1
        else:
            self._far_count -= 1
        self.context -= len(req.slot_ids)
        self._unplace(e)

    # ------------------------------------------------------------------ settling
    def settle(self, e: _Entry) -> None:
        """Gives the request the tokens, slots, shadow blocks and count of its pending steps."""
        d = self.now - e.g0
        if not d:
            return
        req = e.req
        last = req.slot_ids[-1]
        if self._tails.get(last) is e:
            del self._tails[last]
        req.output_ids.extend(self.sched.runner.span_tokens(req, d))
        row, allocator = req.slot_ids, self.allocator
        if e.fresh:  # alloc_extend's fresh run
            allocator.deferred_pages -= new_units(0, d, self.page)
            req.slot_ids = row + allocator.alloc(d)
            e.fresh = False
        else:
            allocator.deferred_pages -= new_units(row[-1] + 1, d, self.page)
            if not grow_in_place(allocator.next_after, row, d):
                raise RuntimeError(f"request {req.rid}: its row could not grow in place")
        if self.shadow is not None:
            self.shadow.on_decode(req, d, prepaid=True)
        req.metrics["decode_tokens"] = req.metrics.get("decode_tokens", 0) + d
        e.g0 = self.now
        if e.alive:
            self._tails[req.slot_ids[-1]] = e

    def before_extend(self, reqs: list[Req]) -> list[_Entry]:
        """A prefill batch is about to take slots: a request whose prefix ends where a running
        row's run ends would continue that run in place if the running one has not decoded
        since (step by step, it would have moved the run's end). Settles those rows; returns
        them for `after_extend`."""
        touched = []
        for req in reqs:
            if len(req.prefix_indices):
                e = self._tails.get(req.prefix_indices[-1])
                if e is not None:
                    self.settle(e)
                    touched.append(e)
        return touched

    def after_extend(self, touched: list[_Entry]) -> None:
        """Re-files the rows `before_extend` settled: one whose run a newcomer continued now
        opens a fresh run at its next token."""
        for e in touched:
            if e.alive:
                self._unplace(e)
                self._place(e)

    def settle_all(self) -> None:
        """Settles every running request and forgets them (the caller re-joins those that keep
        running, after reading or changing them one by one)."""
        for e in sorted(self.entries.values(), key=lambda e: e.seq):
            self.settle(e)
        self._clear()

    def due(self) -> list[Req]:
        """The requests whose last token is the current step's, settled and left, in the order
        they joined (the running batch's order)."""
        out = []
        while self._finish and self._finish[0][0] <= self.now:
            e = heapq.heappop(self._finish)[2]
            if e.alive:
                self.settle(e)
                self._leave(e)
                out.append(e)
        out.sort(key=lambda e: e.seq)
        return [e.req for e in out]

    # ------------------------------------------------------------------ aggregates
    def steps_to_finish(self) -> int:
        """Steps until the first running request finishes."""
        while not self._finish[0][2].alive:
            heapq.heappop(self._finish)
        return self._finish[0][0] - self.now

    def reserved_outputs(self) -> int:
        """sum(min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS)) over the batch."""
        g, clip = self.now, CLIP_MAX_NEW_TOKENS
        while self._far and self._far[0][0] <= g:
            e = heapq.heappop(self._far)[2]
            if e.alive:
                e.near = True
                self._near_sum += e.finish
                self._near_count += 1
                self._far_count -= 1
        return self._near_sum - g * self._near_count + clip * self._far_count

    def pages_needed(self, steps: int) -> int:
        """Pages the next `steps` decode steps open in the pool."""
        if self.page == 1:
            return len(self.entries) * steps
        return hits_sum(self._slot_hist, self.now, steps)

    def estimate_tokens(self) -> int:
        """SGLang's new_tokens_required_next_decode: a page per row that fills whole pages."""
        if self.page == 1:
            return len(self.entries)
        return self._len_hist[-self.now % self.page] * self.page

    def blocks_needed(self, steps: int) -> int:
        """Blocks the next `steps` decode steps take from the shadow's pool."""
        return hits_sum(self._block_hist, self.now, steps)

    def block_room(self, max_steps: int) -> int:
        """The most steps (<= max_steps) whose new blocks the shadow's free pool holds."""
        if self.shadow is None:
            return max_steps
        return most_steps(self.blocks_needed, self.shadow.num_free_blocks, max_steps)

    def step(self, steps: int) -> None:
        """`steps` decode steps of every running request: pages and blocks taken now, tokens
        and ids handed out when each request is settled. The caller has checked that they fit
        without evicting."""
        pages = self.pages_needed(steps)
        self.allocator.deferred_pages += pages
        if self.shadow is not None:
            self.shadow.reserve(self.blocks_needed(steps))
        self.context += len(self.entries) * steps
        self.now += steps
