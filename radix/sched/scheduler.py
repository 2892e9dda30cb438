"""The continuous-batching loop: waiting queue -> policy -> admission -> prefill -> decode steps.

Follows SGLang 0.5.23's `Scheduler.get_next_batch_to_run` (managers/scheduler.py): a prefill
batch when admission finds one (prefill first), else one batched decode step of every running
request; a prompt is checkpointed right after its prefill (`cache_unfinished_req`), so requests
arriving during its decode already hit; each allocation evicts only the shortfall; retraction
when a decode step lacks slots; `batch_is_full`: after admission stops for want of memory or of
request rows, no admission is tried (no policy sort, no match) until a request leaves the batch
(finishes, is retracted, or a chunk's prefill ends). `step(until=t)`: a priced runner may
fast-forward decode steps (span.py). A hybrid model's UnifiedRadixCache: hybrid.py's steps.
Leaves out: overlap scheduling, mixed chunks, abort.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from radix.events import EventSink
from radix.request import Req
from radix.sched import hybrid as hybrid_steps
from radix.sched.admission import (
    CLIP_MAX_NEW_TOKENS,
    AddReqResult,
    PrefillAdder,
    alloc_for_decode,
    alloc_for_extend,
    check_decode_mem,
    evict_shortfall,
    match_for_admission,
    retract_decode,
)
from radix.sched.ledger import DecodeLedger
from radix.sched.policy import SchedulePolicy
from radix.sched.span import apply_span, decay_ratio, span_length
from radix.tree.hybrid_lifecycle import SchedulerKnobs


class StepOutput(NamedTuple):
    next_token_ids: list[int | None]  # one per request; None for a chunk that is not the last
    seconds: float  # time the forward took (measured or from the cost model)


class Runner(Protocol):
    def extend(self, reqs: list[Req], prefix_lens: list[int]) -> StepOutput: ...
    def decode(self, reqs: list[Req]) -> StepOutput: ...
    # optional, priced runners only: run up to max_steps decode steps of `reqs` at once (each
    # adds one token to every request), stopping after the first that ends at or past `until`;
    # returns how many ran, having advanced the clock step by step as decode would
    #   def decode_span(self, reqs, max_steps, until) -> int
    #   def span_tokens(self, req, num) -> Sequence[int]   # the next num tokens of req


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "lpm"  # a radix.sched.policy.POLICIES name
    max_prefill_tokens: int = 16384  # SGLang's per-round input budget (rem_input_tokens)
    chunked_prefill_size: int | None = None  # None: no chunking (SGLang sizes it per GPU)
    max_running_requests: int | None = None  # None: bounded by memory only
    check_threshold: int = 32  # in-batch prefix caching: check requests matching <= this
    deprioritize_threshold: int = 32  # ... and deprioritize those sharing >= this in-batch
    fcfs_fallback_len: int = 128  # LPM runs FCFS when more requests wait
    init_new_token_ratio: float = 0.7  # SGLang's estimate of how much of max_new_tokens is used
    min_new_token_ratio: float = 0.098  # 0.7 * 0.14
    new_token_ratio_decay: float = (0.7 - 0.098) / 600  # per decode step
    seed: int = 0  # for the "random" policy

    def __post_init__(self) -> None:
        if self.max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be >= 1, got {self.max_prefill_tokens}")
        if self.chunked_prefill_size is not None and self.chunked_prefill_size < 1:
            raise ValueError(f"chunked_prefill_size must be >= 1 or None, "
                             f"got {self.chunked_prefill_size}")


def slots_to_admit(req: Req, page_size: int = 1) -> int:
    """KV slots a pool must hold *more than* to ever admit `req` alone: PrefillAdder stops a
    request when prompt + max_new_tokens (clipped at 4,096) + one page >= free + evictable.

    A 20-token prompt with 2 new tokens, page 1: 23, so a pool of 23 slots never admits it.
    >>> slots_to_admit(Req("a", list(range(20)), max_new_tokens=2))
    23
    """
    return len(req.origin_input_ids) + min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS) + page_size


def check_fits(req: Req, pool_size: int, page_size: int = 1) -> None:
    """Raises ValueError when `req` can never be admitted into a pool of `pool_size` slots,
    instead of letting it wait forever (SGLang rejects such input at validation)."""
    need = slots_to_admit(req, page_size)
    if need >= pool_size:
        raise ValueError(
            f"request {req.rid}: {len(req.origin_input_ids):,} prompt + "
            f"{min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS):,} new tokens + a page of "
            f"{page_size} need a KV pool of more than {need:,} slots; it holds {pool_size:,}")


class StepReport(NamedTuple):
    kind: str  # "prefill", "decode" or "idle"
    rids: list[str]  # requests in the forward
    extend_lens: list[int]  # prefill: tokens computed per request; decode: 1 each
    prefix_lens: list[int]  # prefill: tokens reused per request
    seconds: float  # forward time reported by the runner
    now: float  # clock after the step
    finished: list[str]
    retracted: list[str]
    evicted_tokens: int  # tokens evicted from the tree during the step
    num_steps: int = 1  # decode steps this report stands for (a fast-forwarded span: > 1)


class Scheduler:
    """Owns the waiting queue and the running batch; the tree and the pool are shared with the
    runner. `add_request` then `step()` until `has_work` is False. Metrics go to `req.metrics`:
    arrival, prompt_tokens, ttft, matched_tokens (at first admission), prefilled_tokens (re-prefills
    after a retraction included), decode_tokens, finish_time, retractions.

    A UnifiedRadixCache tree is driven as SGLang drives a hybrid model's (radix/sched/hybrid.py);
    `knobs` are its scheduler settings (SchedulerKnobs, SGLang's defaults when None), and its
    allocator is the tree's own."""

    def __init__(self, runner: Runner, tree_cache: Any, allocator: Any,
                 config: SchedulerConfig | None = None, *, clock: Callable[[], float] | None = None,
                 sink: EventSink | None = None, shadow: Any = None,
                 knobs: SchedulerKnobs | None = None) -> None:
        self.runner, self.tree_cache, self.allocator = runner, tree_cache, allocator
        self.config = config = config or SchedulerConfig()
        chunk, page = config.chunked_prefill_size, tree_cache.page_size
        if chunk is not None and chunk < page:  # a chunk is cut to whole pages: 0 would stall
            raise ValueError(f"chunked_prefill_size ({chunk}) must be >= page_size ({page})")
        self.clock = clock or time.monotonic
        self.sink = sink
        self.shadow = shadow  # a BlockShadow fed the same requests, or None
        self.policy = SchedulePolicy(
            config.policy, tree_cache, check_threshold=config.check_threshold,
            deprioritize_threshold=config.deprioritize_threshold,
            fcfs_fallback_len=config.fcfs_fallback_len, seed=config.seed, sink=sink)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked_req: Req | None = None
        self.finished: list[Req] = []
        self.new_token_ratio = config.init_new_token_ratio
        # SGLang's running_batch.batch_is_full: admission skipped until a request leaves
        self.batch_is_full = False
        self.notices: list[str] = []  # fallback notices, as they happened
        self.num_retracted = 0
        self.evicted_tokens = 0
        # a hybrid model's tree (UnifiedRadixCache): its steps, None for a RadixCache
        self.hybrid = (hybrid_steps.HybridSteps(tree_cache, knobs)
                       if hybrid_steps.is_hybrid_tree(tree_cache) else None)
        self.max_running_requests = (config.max_running_requests if self.hybrid is None else
                                     self.hybrid.running_cap(config.max_running_requests))
        # decode steps counted in aggregate, rows settled when read (radix/sched/ledger.py):
        # for priced runners over allocators of runs, with no event sink to feed one by one
        self.ledger = DecodeLedger(self) if (
            sink is None and hasattr(runner, "decode_span") and hasattr(runner, "span_tokens")
            and getattr(allocator, "runs", False) and self.hybrid is None) else None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked_req)

    def add_request(self, req: Req) -> None:
        """Queues `req`; ValueError (check_request) when the pool could never admit it."""
        self.check_request(req)
        req.metrics.setdefault("arrival", req.arrival)
        req.metrics.setdefault("prompt_tokens", len(req.origin_input_ids))
        self.waiting.append(req)

    def check_request(self, req: Req) -> None:
        """ValueError when the pools could never admit `req` (check_fits; a hybrid tree's SWA
        pool too, radix/sched/hybrid.py). Reads only the pools' sizes: safe from any thread."""
        page = self.tree_cache.page_size
        if self.hybrid is not None:
            self.hybrid.check_fits(req, slots_to_admit(req, page),
                                   self.config.chunked_prefill_size)
            return
        pages = getattr(self.allocator, "num_pages", None)  # a paged pool holds whole pages
        check_fits(req, self.allocator.size if pages is None else pages * page, page)

    def step(self, until: float | None = None) -> StepReport:
        """One forward: a prefill batch if admission builds one, else a decode step. With
        `until` (the next arrival's time), a run of decode steps in which no request can be
        admitted (none waits, or `batch_is_full`), finish early, be retracted or evict may go
        at once (span.py)."""
        evicted_before = self.evicted_tokens
        deferred = self._deferred(until)
        adder = self._get_new_batch_prefill()
        if adder is not None and adder.can_run_list:
            return self._run_prefill(adder, evicted_before)
        if self.running and deferred:
            return self._run_decode_deferred(until if adder is None else None, evicted_before)
        if self.running:
            if until is not None and adder is None and self.hybrid is None:  # none waits, or
                # none admitted till one leaves (a hybrid tree frees and tracks every step)
                start = self.clock()
                steps = span_length(self, until)
                if steps:
                    return self._run_decode_span(steps, self.clock() - start)
            return self._run_decode(evicted_before)
        if adder is not None:  # waiting work, nothing running, nothing admitted: it never will be
            raise RuntimeError(f"scheduler stalled: nothing runs and no waiting request can be "
                               f"admitted ({adder.stop_reason or 'no reason given'})")
        return StepReport("idle", [], [], [], 0.0, self.clock(), [], [], 0)

    # ----------------------------------------------------------------------------- prefill

    def _get_new_batch_prefill(self) -> PrefillAdder | None:
        """SGLang 0.5.23's _get_new_batch_prefill_raw. None: no admission tried this step (none
        waiting, or `batch_is_full` and no chunk to continue)."""
        cfg, running, hybrid = self.config, self.running, self.hybrid
        if not running or (hybrid is not None and hybrid.swa):  # an empty batch has no request
            # left to leave and clear the flag; SGLang retries admission every pass for SWA
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None
        cap = self.max_running_requests
        if cap is not None and self.chunked_req is None and len(running) >= cap:
            self.batch_is_full = True  # get_num_allocatable_reqs <= 0: before the sort
            return None
        report = self.policy.calc_priority(self.waiting, running)
        if report.notice:
            self.notices.append(report.notice)
        ledger = self.ledger
        adder = (PrefillAdder if hybrid is None else hybrid_steps.HybridPrefillAdder)(
            self.tree_cache, self.allocator, running,
            rem_input_tokens=cfg.max_prefill_tokens,
            rem_chunk_tokens=cfg.chunked_prefill_size,
            new_token_ratio=self.new_token_ratio,
            page_size=self.tree_cache.page_size, sink=self.sink,
            reserved_outputs=ledger.reserved_outputs() if ledger is not None
            and ledger.entries else None)
        match = match_for_admission if hybrid is None else hybrid.match
        if self.chunked_req is not None:
            carried = self.chunked_req
            self.chunked_req = adder.add_chunked_req(carried)
            if hybrid is not None and not adder.can_run_list:
                return adder  # the SWA pool cannot take its next chunk yet: nobody joins
        waiting, scanned, req = self.waiting, 0, None
        for req in waiting:
            if adder.budget_state() == AddReqResult.OTHER:
                break  # a chunk (or a resumed one) spent the pass's budget: no one joins
            if cap is not None and len(running) + len(adder.can_run_list) >= cap:
                self.batch_is_full = True
            if self.batch_is_full or adder.new_chunked_req is not None:
                break  # (one chunked request at a time)
            scanned += 1
            match(self.tree_cache, req)
            result = adder.add_one_req(req)
            if result != AddReqResult.CONTINUE:
                if result == AddReqResult.NO_TOKEN:  # full only if someone will leave
                    self.batch_is_full = bool(adder.can_run_list or running)
                if hybrid is not None and not (adder.can_run_list
                                               and adder.can_run_list[-1] is req):
                    hybrid.revert(req)  # its copy-on-write Mamba slot goes back
                break
        if adder.can_run_list:  # admitted requests come from the scanned head of the queue
            admitted = set(map(id, adder.can_run_list))
            self.waiting = ([r for r in waiting[:scanned] if id(r) not in admitted]
                            + waiting[scanned:])
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        return adder

    def _run_prefill(self, adder: PrefillAdder, evicted_before: int) -> StepReport:
        reqs, prefix_lens = adder.can_run_list, []
        ledger = self.ledger if self.ledger is not None and self.ledger.entries else None
        touched = ledger.before_extend(reqs) if ledger is not None else []
        if self.hybrid is None:
            self.evicted_tokens += alloc_for_extend(self.tree_cache, self.allocator, reqs,
                                                    adder.extend_lens)
        else:
            self.evicted_tokens += self.hybrid.alloc_for_extend(reqs, adder.extend_lens)
        if touched:
            ledger.after_extend(touched)
        for req, extend_len in zip(reqs, adder.extend_lens):
            prefix_len = len(req.prefix_indices)
            prefix_lens.append(prefix_len)
            if "matched_tokens" not in req.metrics:
                req.metrics["matched_tokens"] = prefix_len
            req.metrics["prefilled_tokens"] = req.metrics.get("prefilled_tokens", 0) + extend_len
            if self.shadow is not None:
                self.shadow.on_prefill(req, extend_len)
        out = self.runner.extend(reqs, prefix_lens)
        now = self.clock()
        finished = []
        for req, token in zip(reqs, out.next_token_ids):
            if req is self.chunked_req:  # SGLang drops it from the merged batch: flag cleared
                self.batch_is_full = False
                self.tree_cache.cache_unfinished_req(req, chunked=True)
                if self.tree_cache.disable or self.hybrid is not None:
                    # NOTE: SGLang's ChunkCache makes the computed slots the next chunk's prefix;
                    # our disabled tree returns at once, so without this the prompt restarts.
                    # (A hybrid tree may insert less than the chunk, or nothing: the next chunk
                    # starts where the KV ends, SGLang's kv_committed_len.)
                    req.prefix_indices = req.slot_ids[:len(req.fill_ids)]
                continue
            req.output_ids.append(token)
            req.metrics.setdefault("ttft", now - req.metrics["arrival"])
            if self._finish_if_done(req, now):
                finished.append(req.rid)
                self.batch_is_full = False
            else:
                self.tree_cache.cache_unfinished_req(req)
                self.running.append(req)
                if self.ledger is not None and self.ledger.entries:
                    self.ledger.join(req)
        return StepReport("prefill", [r.rid for r in reqs], list(adder.extend_lens), prefix_lens,
                          out.seconds, now, finished, [], self.evicted_tokens - evicted_before)

    # ------------------------------------------------------------------------------ decode

    def _run_decode(self, evicted_before: int) -> StepReport:
        hybrid = self.hybrid
        cached = self.tree_cache.total_size()  # check_decode_mem evicts too: counted below
        retracted = self._decode_room()
        reqs = self.running
        if hybrid is None:
            alloc_for_decode(self.tree_cache, self.allocator, reqs)
        else:  # SWA slots out of the window first
            hybrid.prepare_decode(reqs)
        # nothing is inserted before here (a retraction inserts nothing), so what left the
        # tree was evicted: check_decode_mem's, the retraction's and alloc_for_decode's
        self.evicted_tokens += cached - self.tree_cache.total_size()
        if self.shadow is not None:
            for req in reqs:
                self.shadow.on_decode(req)
        out = self.runner.decode(reqs)
        now = self.clock()
        finished = []
        if hybrid is None:
            for req, token in zip(reqs, out.next_token_ids):
                req.output_ids.append(token)
                req.metrics["decode_tokens"] = req.metrics.get("decode_tokens", 0) + 1
                if self._finish_if_done(req, now):
                    finished.append(req.rid)
        else:  # every token, and the Mamba states tracked, before any request finishes
            hybrid.commit_decode(reqs, out.next_token_ids)
            for req in reqs:
                req.metrics["decode_tokens"] = req.metrics.get("decode_tokens", 0) + 1
                if self._finish_if_done(req, now):
                    finished.append(req.rid)
        done = set(finished)
        if done:
            self.batch_is_full = False
        self.running = [r for r in reqs if r.rid not in done]
        return StepReport("decode", [r.rid for r in reqs], [1] * len(reqs), [0] * len(reqs),
                          out.seconds, now, finished, [r.rid for r in retracted],
                          self.evicted_tokens - evicted_before)

    def _decode_room(self) -> list[Req]:
        """check_decode_mem; when the step does not fit, retract_decode (the retracted go back
        to the queue, returned). A hybrid tree checks and evicts every pool."""
        hybrid = self.hybrid
        if (check_decode_mem(self.tree_cache, self.allocator, self.running) if hybrid is None
                else hybrid.check_decode(self.running)):
            self.new_token_ratio = decay_ratio(self.new_token_ratio, 1, self.config)
            return []
        kept, retracted, ratio = (
            retract_decode(self.tree_cache, self.allocator, self.running, self.sink)
            if hybrid is None else hybrid.retract(self.running, self.sink))
        self.running, self.new_token_ratio = kept, ratio
        self.num_retracted += len(retracted)
        self.batch_is_full = False  # (retract_decode takes at least one)
        for req in retracted:
            if self.shadow is not None:
                self.shadow.on_release(req)
        self.waiting.extend(retracted)
        return retracted

    def _deferred(self, until: float | None) -> bool:
        """Whether this step's decoding goes through the ledger; settles it when not. Joins
        the whole running batch when the ledger does not hold it yet."""
        ledger = self.ledger
        if ledger is None:
            return False
        if until is None or (self.shadow is not None and not self.shadow.can_defer):
            if ledger.entries:
                ledger.settle_all()
            return False
        if len(ledger.entries) != len(self.running):
            ledger.settle_all()
            for req in self.running:
                ledger.join(req)
        return True

    def _run_decode_deferred(self, until: float | None, evicted_before: int) -> StepReport:
        """Decode steps through the ledger: the same steps as _run_decode / a fast-forwarded
        span while nothing needs evicting, retracting or a short block pool (checked in
        aggregate); otherwise the rows are settled and the one-step path runs."""
        ledger, reqs, page = self.ledger, self.running, self.tree_cache.page_size
        n, free = len(reqs), self.allocator.available_size()
        start = self.clock()
        steps = 0
        if until is not None:  # as span_length, from the ledger's aggregates
            k = min(ledger.steps_to_finish(), free // (n * page))
            if k > 1:
                k = ledger.block_room(k)
            if k > 1:
                steps = self.runner.decode_span(reqs, k, until, context=ledger.context)
        if not steps:
            if not self._step_fits(n * page):  # retraction or a short block pool: one by one
                ledger.settle_all()
                report = self._run_decode(evicted_before)
                for req in self.running:
                    ledger.join(req)
                return report
            # as _run_decode: the step's slots and blocks are taken before it is priced
            steps = 1
            ledger.step(1)
            self.runner.decode_span(reqs, 1, float("inf"), context=ledger.context - n)
            self.new_token_ratio = decay_ratio(self.new_token_ratio, 1, self.config)
        else:  # as a fast-forwarded span: priced, then applied
            self.new_token_ratio = decay_ratio(self.new_token_ratio, steps, self.config)
            ledger.step(steps)
        now = self.clock()
        done = ledger.due()
        for req in done:
            self._finish_if_done(req, now)
        if done:
            self.running = _without(reqs, done)
            self.batch_is_full = False
        return StepReport("decode", list(map(_RID, reqs)), [steps] * n, [0] * n,
                          now - start, now, [r.rid for r in done], [],
                          self.evicted_tokens - evicted_before, steps)

    def _step_fits(self, pages_tokens: int) -> bool:
        """Whether one decode step of the ledger's batch fits, after the evictions _run_decode
        would make first: check_decode_mem's (the shortfall of the step's estimate), then
        alloc_for_decode's (of a page per request, `pages_tokens`), same sizes, same order.
        The tree's evictable leaves are not the deferred rows (those are locked), so the
        evictions need no row settled. False when the evictions cannot free enough (then
        _run_decode retracts; its own evictions find nothing more) or the shadow's block pool
        is short (its evictions read rows one by one)."""
        ledger, tree, alloc = self.ledger, self.tree_cache, self.allocator
        if self.shadow is not None and ledger.blocks_needed(1) > self.shadow.num_free_blocks:
            return False
        need = ledger.estimate_tokens()
        if alloc.available_size() < max(need, pages_tokens):
            self.evicted_tokens += evict_shortfall(tree, alloc, need)
            if alloc.available_size() < need:
                return False
            self.evicted_tokens += evict_shortfall(tree, alloc, pages_tokens)
        return alloc.available_size() >= pages_tokens

    def _run_decode_span(self, steps: int, seconds: float) -> StepReport:
        """`steps` decode steps at once, already priced by the runner (radix/sched/span.py)."""
        reqs, now = self.running, self.clock()
        apply_span(self, steps)
        finished = [r.rid for r in reqs if self._finish_if_done(r, now)]
        done = set(finished)
        if done:
            self.batch_is_full = False
        self.running = [r for r in reqs if r.rid not in done]
        return StepReport("decode", [r.rid for r in reqs], [steps] * len(reqs),
                          [0] * len(reqs), seconds, now, finished, [], 0, steps)

    def _finish_if_done(self, req: Req, now: float) -> bool:
        if not req.finished:
            return False
        self.tree_cache.cache_finished_req(req)
        req.metrics["finish_time"] = now
        self.finished.append(req)
        if self.shadow is not None:
            self.shadow.on_release(req)
        return True

    def run_to_completion(self, max_steps: int = 10_000_000) -> list[StepReport]:
        """Steps until no work is left; for tests and the simulator."""
        reports = []
        while self.has_work:
            if len(reports) >= max_steps:
                raise RuntimeError(f"no completion after {max_steps} steps")
            reports.append(self.step())
        return reports


_RID = attrgetter("rid")


def _without(reqs: list[Req], gone: list[Req]) -> list[Req]:
    """reqs in order without the requests in `gone` (a batch of thousands decoding while a
    few finish: a few removals by identity in C, not a Python pass over the batch)."""
    if len(gone) <= 8:
        out = reqs.copy()
        for r in gone:
            out.remove(r)  # Req compares by identity (eq=False)
        return out
    ids = set(map(id, gone))
    return [r for r in reqs if id(r) not in ids]
