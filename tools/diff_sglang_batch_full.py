"""Differential check of our batch_is_full against SGLang 0.5.23's own scheduler code (not a test).

Executes SGLang's `Scheduler._get_new_batch_prefill_raw` (its source cut from
managers/scheduler.py, run over a stand-in `self`) as the admission step of a second copy of our
scheduler, beside our scheduler's own `_get_new_batch_prefill`, on the same random workloads:
shared stems, pools small enough that admission stops for memory, max_running_requests 2, 3 or
unbounded, chunking off/16/64, pages 1 and 4, lpm/fcfs/dfs-weight. SGLang's code decides when the
flag is set, when admission returns early (before or after the policy's sort) and when a set flag
stops the waiting-queue scan; the budgets inside it are ours (PrefillAdder, checked elsewhere).
The clears outside that function (get_next_batch_to_run's filter_batch of the last prefill
batch and of the running batch, update_running_batch's after a retraction) are transcribed from
managers/scheduler.py: a finished request, a retraction, a mid-chunk request leaving the batch.
Compared after every step: its kind and requests, the flag, and the sorts so far.
`--break-rule` breaks one of our rules to show the check catches it.

    python tools/diff_sglang_batch_full.py /tmp/sgl/ex --seeds 20 [--break-rule never-set]
"""

from __future__ import annotations

import ast
import builtins
import itertools
import random
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diff_sglang_schedule import load_schedule  # noqa: E402
from wheels import run_seeds, wheel_args, wheel_parser  # noqa: E402

from radix.request import (
    Req,  # noqa: E402
    SlotAllocator,  # noqa: E402
)
from radix.runs.costs import CostModel  # noqa: E402
from radix.runs.sim import SimClock, SimRunner  # noqa: E402
from radix.sched.admission import PrefillAdder, match_for_admission  # noqa: E402
from radix.sched.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

BREAK_RULES = ("never-set", "keep-on-finish", "sort-while-full")
STATS = {"set": 0, "skipped": 0, "steps": 0}


class _Globals(dict):
    """scheduler.py's module globals for the cut function: builtins as usual, a MagicMock for
    anything else it names but this check never reaches (annotations, stats, tensors)."""

    def __missing__(self, key):
        if hasattr(builtins, key):
            raise KeyError(key)
        self[key] = mock.MagicMock(name=key)
        return self[key]


def load_prefill_raw(root: Path, sp):
    """SGLang's Scheduler._get_new_batch_prefill_raw, executed from its own source."""
    path = root / "sglang/srt/managers/scheduler.py"
    text = path.read_text()
    cls = next(n for n in ast.parse(text).body
               if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    fn = next(n for n in cls.body
              if isinstance(n, ast.FunctionDef) and n.name == "_get_new_batch_prefill_raw")
    src = "\n" * (fn.lineno - 1) + textwrap.dedent(ast.get_source_segment(text, fn))
    ns = _Globals(AddReqResult=sp.AddReqResult, TEST_RETRACT=False, Req=Req)
    exec(compile(src, str(path), "exec"), ns)
    return ns["_get_new_batch_prefill_raw"]


class _Batch:
    """SGLang's running ScheduleBatch, as far as the flag goes."""

    def __init__(self, reqs: list[Req], full: bool) -> None:
        self.reqs, self.batch_is_full = reqs, full

    def is_empty(self) -> bool:
        return not self.reqs

    def batch_size(self) -> int:
        return len(self.reqs)


class _Adder:
    """Our PrefillAdder behind SGLang's PrefillAdder interface (its results as SGLang's enum)."""

    def __init__(self, sched: Scheduler, running: list[Req], sg_result) -> None:
        cfg, self._sg = sched.config, sg_result
        self.ours = PrefillAdder(sched.tree_cache, sched.allocator, running,
                                 rem_input_tokens=cfg.max_prefill_tokens,
                                 rem_chunk_tokens=cfg.chunked_prefill_size,
                                 new_token_ratio=sched.new_token_ratio,
                                 page_size=sched.tree_cache.page_size)
        self.preempt_list: list[Req] = []
        self.chunked_req_limit, self._chunking = None, False

    def __getattr__(self, name):  # can_run_list, extend_lens, new_chunked_req, stop_reason
        return getattr(self.ours, name)

    def budget_state(self):
        """Ours stops the scan at a chunked request (one at a time): as a spent budget."""
        if self._chunking or self.ours.new_chunked_req is not None:
            return self._sg["OTHER"]
        return self._sg[self.ours.budget_state().name]

    def add_chunked_req(self, req: Req):
        """Ours marks a continuing chunk as new_chunked_req too; SGLang's only returns it."""
        left = self.ours.add_chunked_req(req)
        self._chunking, self.ours.new_chunked_req = left is not None, None
        return left

    def add_one_req(self, req: Req, has_chunked_req: bool, truncation_align_size=None):
        return self._sg[self.ours.add_one_req(req).name]

class _SGSelf:
    """The Scheduler fields _get_new_batch_prefill_raw reads, over one of our schedulers."""

    enable_priority_preemption = is_hybrid_swa = enable_lora = is_mixed_chunk = False
    enable_hicache_storage = enable_lmcache = enable_hierarchical_cache = False
    enable_unified_cache_external_linker = enable_priority_scheduling = False
    min_free_slots_delayer = dynamic_chunk_sizer = hisparse_coordinator = dllm_config = None
    truncation_align_size = model_config = spec_algorithm = None
    enable_overlap = False
    processed_tokens_counter = priority_scheduling_preemption_threshold = 0
    max_prefill_bs = max_running_requests = 0

    def __init__(self, sched: Scheduler, sg_result, sorts: list[int]) -> None:
        self._s, self._sg, self.adder = sched, sg_result, None
        self.waiting_queue, self.chunked_req = sched.waiting, sched.chunked_req
        self.chunked_prefill_size = sched.config.chunked_prefill_size
        self.max_prefill_tokens = sched.config.max_prefill_tokens
        self.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
        self.tree_cache = SimpleNamespace(buffer_pipeline=None, storage_prefetch_retries=None)
        self.req_to_token_pool = SimpleNamespace()
        self.tp_worker = SimpleNamespace(model_runner=SimpleNamespace(
            attn_backend=SimpleNamespace(), prefill_aware_swa=False))
        self.new_token_ratio_tracker = SimpleNamespace(current=sched.new_token_ratio)
        self.load_inquirer = mock.MagicMock()
        self.page_size = sched.tree_cache.page_size
        self.token_to_kv_pool_allocator = sched.allocator

        def calc_priority(queue, running_batch, processed_tokens=0):
            sorts[0] += 1
            report = sched.policy.calc_priority(queue, running_batch.reqs)
            if report.notice:
                sched.notices.append(report.notice)
        self.policy = SimpleNamespace(calc_priority=calc_priority,
                                      shortest_prefill_chunk_limit=lambda *a: None)
        for req in [*sched.waiting, *([sched.chunked_req] if sched.chunked_req else [])]:
            req.kv = SimpleNamespace(holds_kv=req is sched.chunked_req, holds_mamba=False)
            req.token_indices_to_pool = req.beam_group = None
            req.inflight_middle_chunks = req.extend_len = 0
            req.init_next_round_input = (lambda tree=None, r=req: tree is not None
                                         and match_for_admission(sched.tree_cache, r))

    def get_num_allocatable_reqs(self, running_bs, beam_width=None, running_batch=None,
                                 num_held_rows=0) -> int:
        """Rows of a req_to_token pool of max_running_requests rows (unbounded: plenty)."""
        cap = self._s.config.max_running_requests
        if cap is None:
            return 1 << 30
        held = len(self._s.running) + (self._s.chunked_req is not None)
        return max(cap - held + num_held_rows, 0)

    def get_prefill_adder_class(self):
        def make(page_size, tree_cache, allocator, running_batch, *args, **kwargs):
            self.adder = _Adder(self._s, running_batch.reqs, self._sg)
            return self.adder
        return make


class _Mirror(Scheduler):
    """Our scheduler with SGLang's _get_new_batch_prefill_raw as its admission step and its own
    flag, cleared as get_next_batch_to_run / update_running_batch clear it (transcribed)."""

    raw = None  # set by run()
    sg_result = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.flag, self.sorts = False, [0]

    def step(self, until=None):
        rep = super().step(until)
        chunk_left = rep.kind == "prefill" and self.chunked_req is not None and \
            self.chunked_req.rid in rep.rids
        if rep.finished or rep.retracted or chunk_left:
            self.flag = False
        self.batch_is_full = self.flag
        return rep

    def _get_new_batch_prefill(self):
        shim = _SGSelf(self, self.sg_result, self.sorts)
        batch = _Batch(self.running, self.flag)
        _ret, batch = type(self).raw(shim, None, batch)
        self.flag = self.batch_is_full = batch.batch_is_full
        self.waiting, self.chunked_req = shim.waiting_queue, shim.chunked_req
        return shim.adder.ours if shim.adder is not None else None


class _Broken(Scheduler):
    """Our scheduler with one rule broken (--break-rule), to show the check catches it."""

    rule: str | None = None

    def _get_new_batch_prefill(self):
        if self.rule == "sort-while-full" and self.batch_is_full and self.waiting:
            self.policy.calc_priority(self.waiting, self.running)
        adder = super()._get_new_batch_prefill()
        if self.rule == "never-set":
            self.batch_is_full = False
        self._admission_flag = self.batch_is_full
        return adder

    def step(self, until=None):
        rep = super().step(until)
        if self.rule == "keep-on-finish" and rep.finished and not rep.retracted:
            self.batch_is_full = self._admission_flag
        return rep


def workload(rng: random.Random) -> list[Req]:
    stems = [[s * 100 + j for j in range(rng.randrange(4, 40))] for s in range(3)]
    return [Req(f"p{i}", rng.choice(stems) + [5000 + i * 50 + j
                                             for j in range(rng.randrange(1, 30))],
                max_new_tokens=rng.randrange(1, 16)) for i in range(rng.randrange(2, 14))]


def build(cls, capacity: int, page: int, cfg: SchedulerConfig) -> Scheduler:
    alloc = SlotAllocator(capacity)
    tree = RadixCache(page_size=page, allocator=alloc)
    clock = SimClock()
    return cls(SimRunner(CostModel(), clock), tree, alloc, cfg, clock=clock)


def counting(sched: Scheduler) -> list[int]:
    sorts, inner = [0], sched.policy.calc_priority

    def calc_priority(*args, **kwargs):
        sorts[0] += 1
        return inner(*args, **kwargs)
    sched.policy.calc_priority = calc_priority
    return sorts


def run(seed: int, policy: str, chunk: int | None, page: int, cap: int | None,
        rule: str | None) -> int:
    rng = random.Random(seed)
    reqs = workload(rng)
    capacity = rng.randrange(max(len(r.origin_input_ids) + r.max_new_tokens for r in reqs)
                             + 2 * page + 1, 400)
    cfg = SchedulerConfig(policy=policy, chunked_prefill_size=chunk, max_running_requests=cap,
                          max_prefill_tokens=rng.choice([64, 10**6]))
    ours, theirs = build(_Broken, capacity, page, cfg), build(_Mirror, capacity, page, cfg)
    ours.rule = rule
    our_sorts = counting(ours)
    for r in reqs:
        ours.add_request(Req(r.rid, list(r.origin_input_ids), max_new_tokens=r.max_new_tokens))
        theirs.add_request(Req(r.rid, list(r.origin_input_ids), max_new_tokens=r.max_new_tokens))
    steps = 0
    while ours.has_work or theirs.has_work:
        where = (f"seed {seed}, {policy}, chunk {chunk}, page {page}, max_running {cap}, "
                 f"capacity {capacity}, step {steps}")
        a, b = ours.step(), theirs.step()
        assert (a.kind, a.rids) == (b.kind, b.rids), f"{where}: ours {a.kind} {a.rids}, " \
            f"sglang {b.kind} {b.rids}"
        assert ours.batch_is_full == theirs.flag, \
            f"{where}: batch_is_full ours {ours.batch_is_full}, sglang {theirs.flag}"
        assert our_sorts[0] == theirs.sorts[0], \
            f"{where}: sorts ours {our_sorts[0]}, sglang {theirs.sorts[0]}"
        STATS["set"] += theirs.flag
        STATS["skipped"] += theirs.flag and bool(theirs.waiting)
        steps += 1
        assert steps < 100_000, f"{where}: no end"
    STATS["steps"] += steps
    return steps


def main() -> int:
    ap = wheel_parser(__doc__, "sglang", seeds=20)
    ap.add_argument("--break-rule", choices=BREAK_RULES)
    args = wheel_args(ap, "sglang/srt/managers/scheduler.py")
    _radix, _base, _params, sp = load_schedule(args.root)
    _Mirror.raw = staticmethod(load_prefill_raw(args.root, sp))
    _Mirror.sg_result = {m.name: m for m in sp.AddReqResult}
    cases = itertools.product(("lpm", "fcfs", "dfs-weight"), (None, 16, 64), (1, 4),
                              (None, 2, 3), range(args.seeds))
    steps, failures = run_seeds(
        lambda policy, chunk, page, cap, seed: run(seed, policy, chunk, page, cap,
                                                   args.break_rule), cases)
    print(f"{steps:,} scheduler steps compared, {failures} mismatching runs; steps ending with "
          f"batch_is_full set {STATS['set']:,}, of which with requests left waiting "
          f"{STATS['skipped']:,}" + (f" (rule broken: {args.break_rule})"
                                     if args.break_rule else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
