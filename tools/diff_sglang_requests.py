"""Request-level differential check of our lifecycle against SGLang 0.5.23's own code (not a test).

Drives SGLang's RadixCache (loaded by path with stubs, as tools/diff_sglang.py does) through whole
request lifecycles with SGLang's own match_kv_cache, checkpoint_kv_cache, release_kv_cache and
evict_from_tree_cache (mem_cache/common.py) and its allocator base class (evict_to_free_tokens,
check_decode_capacity, free_segment) over an emulated req_to_token row and paged pool, beside our
RadixCache + radix.sched.admission on the same requests: admission match on prompt(+output)[:-1],
lock, extend allocation evicting the shortfall (pools small enough to force it), chunked prefill,
prefill checkpoint, decode, finish (seed and 0.5.23 names, over-allocated rows), abort, retraction,
pages 1 and 16, all seven policies. Compared after every op: prefix lengths, slots freed (exact
ids), evicted tokens and nodes, sizes, free slots, each request's row and protected/inserted
lengths, and the whole tree (keys, namespaces, slots, lock_ref, hit_count, priority, root included).
The scheduler around those calls (which op, the retraction loop) is transcribed from
managers/schedule_batch.py, since that module needs a GPU stack.

    python tools/diff_sglang_requests.py /tmp/sgl/ex --seeds 100
"""

from __future__ import annotations

import itertools
import random
import sys
from array import array
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diff_sglang_schedule import load_schedule  # noqa: E402
from wheels import load, run_seeds, wheel_args, wheel_parser  # noqa: E402

from radix.request import (
    Req,  # noqa: E402
    SlotAllocator,  # noqa: E402
)
from radix.sched import admission as adm  # noqa: E402
from radix.tree.evict_policy import POLICIES as ALL_POLICIES  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

# the classic class has no T-LRU (0.5.23 keeps its bookkeeping in the unified tree only)
POLICIES = tuple(p for p in ALL_POLICIES if p != "tlru")

ROW_WIDTH = 512
RETRACT_STEPS = 20
STATS = dict.fromkeys(["evictions", "retractions", "chunks", "finishes", "over_allocated",
                       "aborts", "prompt_splits", "admissions", "decode_steps"], 0)


def load_lifecycle(root: Path) -> SimpleNamespace:
    radix, base, params, _ = load_schedule(root)
    common = sys.modules["sglang.srt.mem_cache.common"]
    common.ceil_align = radix.ceil_align = lambda x, a: -(-x // a) * a
    common.page_interleave_shard_size = lambda allocator: 1
    alloc_base = load("sglang.srt.mem_cache.allocator.base",
                       root / "sglang/srt/mem_cache/allocator/base.py")
    return SimpleNamespace(radix=radix, base=base, params=params, common=common,
                           alloc_base=alloc_base)


def make_allocator_class(alloc_base):
    class SGAllocator(alloc_base.BaseTokenToKVPoolAllocator):
        """SGLang's allocator base (eviction, capacity, free_segment) over our paged pool."""

        def __init__(self, slots: SlotAllocator, freed: list) -> None:
            super().__init__(slots.size, slots.page_size, torch.int64, "cpu", None, False)
            self.slots, self.freed = slots, freed

        def clear(self) -> None: ...

        def available_size(self) -> int:
            return self.slots.available_size()

        def alloc(self, need_size: int):
            return self.slots.alloc(need_size)

        def free(self, free_index) -> None:
            ids = free_index.tolist()
            self.freed.extend(ids)
            self.slots.free(ids)

    return SGAllocator


class Rows:
    """SGLang's ReqToTokenPool: one row of KV slot ids per running request."""

    def __init__(self) -> None:
        self.req_to_token = torch.zeros((64, ROW_WIDTH), dtype=torch.int64)
        self.free_rows = list(range(64))

    def write(self, index, values) -> None:
        self.req_to_token[index] = values

    def free(self, req) -> None:
        self.free_rows.append(req.kv.req_pool_idx)
        req.kv.req_pool_idx = None


class SGKv:
    """The ReqKvInfo fields the tree and release_kv_cache read."""

    def __init__(self) -> None:
        self.req_pool_idx = None
        self.cache_protected_len = self.cache_inserted_len = 0
        self.kv_committed_len = self.kv_allocated_len = 0
        self.is_kv_released, self.holds_mamba, self.swa_evict_floor = True, False, 0

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None

    def mark_kv_released(self) -> None:
        self.is_kv_released = True

    def get_evicted_seqlen(self, component) -> int:
        return 0

    def swa_dead_lo(self, page_size: int) -> int:
        return 0


class SGReq:
    """The Req attributes SGLang's match_kv_cache, checkpoint and release_kv_cache read."""

    def __init__(self, r: Req) -> None:
        self.rid, self.extra_key, self.cache_salt, self.priority = (
            r.rid, r.extra_key, r.cache_salt, r.priority)
        self.origin_input_ids = array("q", r.origin_input_ids)
        self.output_ids = array("q")
        self.max_new_tokens = r.max_new_tokens
        self.kv = SGKv()
        self.lock = self.last_node = None
        self.finished_len = None
        self.skip_radix_cache_insert = False
        self.prefix_len = self.extend_end = 0
        self.refresh_fill_ids()

    def refresh_fill_ids(self) -> None:
        self.full_untruncated_fill_ids = self.origin_input_ids + self.output_ids

    def finished(self) -> bool:
        return False  # release_kv_cache asks only with a mamba tree

    def owned_kv_len(self) -> int:
        return self.kv.kv_committed_len

    def _compute_max_prefix_len(self, input_len: int) -> int:
        return max(input_len - 1, 0)

    def row(self) -> list[int]:
        return self.tree_row[: self.kv.kv_allocated_len].tolist()

    def reset_for_retract(self) -> None:
        self.prefix_len = 0
        self.last_node = self.lock = None
        self.kv.cache_protected_len = self.kv.cache_inserted_len = 0
        self.kv.kv_committed_len = self.kv.kv_allocated_len = 0


def shape(node) -> tuple:
    """A node as comparable data: key, namespace, slots, lock_ref, hit_count, priority, children."""
    value = tuple(node.value.tolist() if hasattr(node.value, "tolist") else node.value)
    kids = sorted((shape(c) for c in node.children.values()), key=repr)
    tokens = node.key.raw_token_ids() if hasattr(node.key, "raw_token_ids") else node.key.token_ids
    return (tuple(tokens), node.key.extra_key, node.key.cache_salt, value,
            node.lock_ref, node.hit_count, node.priority, tuple(kids))


class Pair:
    """SGLang's side and ours, fed the same requests; `check` compares them after every op."""

    def __init__(self, sg, seed: int, page: int, policy: str) -> None:
        self.rng = rng = random.Random(seed)
        self.sg, self.page = sg, page
        size = (rng.randrange(40, 160) if page == 1 else rng.randrange(6, 15) * page)
        self.sg_freed: list[int] = []
        self.our_freed: list[int] = []
        self.sg_evicted: list = []
        self.our_evicted: list = []
        self.sg_alloc = make_allocator_class(sg.alloc_base)(SlotAllocator(size, page_size=page),
                                                            self.sg_freed)
        self.rows = Rows()
        self.tree = sg.radix.RadixCache(sg.params.CacheInitParams(
            disable=False, req_to_token_pool=self.rows, token_to_kv_pool_allocator=self.sg_alloc,
            page_size=page, eviction_policy=policy))
        self._wrap_sglang()
        self.alloc = SlotAllocator(size, page_size=page)
        self._wrap_free(self.alloc, self.our_freed)
        self.ours = RadixCache(page_size=page, eviction_policy=policy, allocator=self.alloc,
                               flavor="classic")
        evict = self.ours.evict
        self.ours.evict = lambda n: self._log(self.our_evicted, evict(n))
        prefix_len = 50 if page == 1 else 80
        self.prefixes = [[rng.randrange(3) for _ in range(rng.randrange(prefix_len))]
                         for _ in range(3)]
        self.size, self.num_reqs = size, 0
        self.waiting: list[tuple[SGReq, Req]] = []
        self.running: list[tuple[SGReq, Req]] = []
        self.chunked: tuple[SGReq, Req] | None = None
        self.label = f"page {page}, {policy}, seed {seed} ({size} slots)"

    def _wrap_sglang(self) -> None:
        tree, log = self.tree, self.sg_evicted
        evict, delete = tree.evict, tree._delete_leaf

        def logged_evict(params):
            result = evict(params)
            log.append(("evicted", result.num_tokens_evicted))
            return result

        def logged_delete(node):
            log.append(("node", tuple(node.key.token_ids), node.key.extra_key))
            delete(node)

        tree.evict, tree._delete_leaf = logged_evict, logged_delete

    @staticmethod
    def _wrap_free(alloc: SlotAllocator, log: list) -> None:
        free = alloc.free
        alloc.free = lambda ids: (log.extend(ids), free(ids))[1]

    @staticmethod
    def _log(log: list, result):
        for node in result.evicted_nodes:
            log.append(("node", tuple(node.key.token_ids), node.key.extra_key))
        log.append(("evicted", result.num_evicted))
        STATS["evictions"] += bool(result.num_evicted)
        return result

    # --- requests --------------------------------------------------------------------------
    def new_request(self) -> tuple[SGReq, Req]:
        rng = self.rng
        self.num_reqs += 1
        toks = rng.choice(self.prefixes) + [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
        ours = Req(f"r{self.num_reqs}", toks, max_new_tokens=rng.randrange(1, 30),
                   extra_key=rng.choice([None, None, "lora-a"]),
                   cache_salt=rng.choice([None, None, None, "s"]), priority=rng.randrange(3))
        room = self.size - ours.max_new_tokens - 2 * self.page - 8  # it must fit alone
        ours.origin_input_ids = toks[: max(1, room)]
        return SGReq(ours), ours

    def admit(self, where: str) -> None:
        """match_kv_cache / match_for_admission, lock, extend allocation, then the forward's
        result: chunk checkpoint, prefill checkpoint or finish."""
        if self.chunked is not None:
            s, o = self.chunked
            need = len(s.full_untruncated_fill_ids) - s.prefix_len + self.page
            if self.sg_alloc.available_size() + self.tree.evictable_size() >= need:
                self.extend(s, o, where)
            return
        pair = self.waiting.pop(0) if self.waiting and self.rng.random() < 0.5 else (
            self.new_request())
        s, o = pair
        s.refresh_fill_ids()
        fill = s.full_untruncated_fill_ids
        m = self.sg.common.match_kv_cache(s, self.tree, fill, max_prefix_len=len(fill) - 1)
        if m.cache_protected_len is None:
            s.kv.cache_protected_len = s.prefix_len
        adm.match_for_admission(self.ours, o)
        o.cache_protected_len = len(o.prefix_indices)
        assert s.prefix_len == len(o.prefix_indices), f"{where}: prefix {s.prefix_len} != " \
            f"{len(o.prefix_indices)}"
        s.lock = self.tree.lock(s.last_node)
        self.ours.inc_lock_ref(o.last_node)
        extend = len(fill) - s.prefix_len
        demand = extend + (self.page if self.page > 1 else 0)
        fits = self.sg_alloc.available_size() + self.tree.evictable_size() >= demand
        if not fits or len(self.running) >= 10:
            self.tree.unlock(s.lock)
            s.lock = None
            self.ours.dec_lock_ref(o.last_node)
            o.last_node = None
            self.waiting.append(pair)
            return
        STATS["admissions"] += 1
        s.kv.req_pool_idx = self.rows.free_rows.pop(0)
        s.kv.is_kv_released = False
        s.tree_row = self.rows.req_to_token[s.kv.req_pool_idx]
        s.tree_row[: s.prefix_len] = self.tree.prefix_device_indices(s)
        s.kv.kv_committed_len = s.kv.kv_allocated_len = s.prefix_len
        self.extend(s, o, where)

    def extend(self, s: SGReq, o: Req, where: str) -> None:
        fill = s.full_untruncated_fill_ids
        start, ps = s.prefix_len, self.page
        end = len(fill)
        if self.rng.random() < 0.3:  # chunked prefill, page-aligned boundary as the adder cuts
            cut = (start + self.rng.randrange(1, 40)) // ps * ps
            end = cut if start < cut < end else end
        n = end - start
        demand = n + (ps if ps > 1 else 0)
        self.sg.common.evict_from_tree_cache(self.tree, demand)
        last = int(s.tree_row[start - 1]) if start else None
        slots = self.sg_alloc.slots.alloc_extend(last, n)
        assert slots is not None, f"{where}: SGLang side out of slots"
        s.tree_row[start:end] = torch.tensor(slots, dtype=torch.int64)
        s.kv.kv_committed_len = s.kv.kv_allocated_len = end
        o.fill_ids = o.all_ids[:end]
        adm.alloc_for_extend(self.ours, self.alloc, [o], [n])
        if end < len(fill):
            s.extend_end = end
            self.sg.common.checkpoint_kv_cache(s, self.tree)
            self._checkpoint_ours(o, end)
            STATS["chunks"] += 1
            self.chunked = (s, o)
            return
        self.chunked = None
        s.prefix_len = end
        self.sample(s, o)
        if len(o.output_ids) >= o.max_new_tokens:
            self.finish(s, o)
        else:
            s.extend_end = end
            self.sg.common.checkpoint_kv_cache(s, self.tree)
            self._checkpoint_ours(o, end)
            self.running.append((s, o))

    def _checkpoint_ours(self, o: Req, up_to: int) -> None:
        if self.rng.random() < 0.5:
            self.ours.cache_unfinished_req(o, chunked=self.rng.random() < 0.5)
        else:
            self.ours.checkpoint(o, up_to=up_to)

    def sample(self, s: SGReq, o: Req) -> None:
        token = self.rng.randrange(3)
        s.output_ids.append(token)
        o.output_ids.append(token)

    def finish(self, s: SGReq, o: Req) -> None:
        """release_kv_cache(checkpoint=True) / cache_finished_req, sometimes with a row that
        holds over-allocated slots past the committed ones (kv_len_to_handle)."""
        STATS["finishes"] += 1
        STATS["prompt_splits"] += len(o.origin_input_ids) // self.page < (
            s.kv.kv_committed_len // self.page)
        extra = self.rng.choice([0, 0, 0, 1, self.page + 1])
        if extra and self.sg_alloc.available_size() >= extra + self.page:
            committed = s.kv.kv_committed_len
            slots = self.sg_alloc.slots.alloc_extend(int(s.tree_row[committed - 1]), extra)
            s.tree_row[committed:committed + extra] = torch.tensor(slots, dtype=torch.int64)
            s.kv.kv_allocated_len += extra
            STATS["over_allocated"] += 1
            o.slot_ids += self.alloc.alloc_extend(o.slot_ids[-1], extra)
            self.sg.common.release_kv_cache(s, self.tree, checkpoint=True)
            self.ours.cache_finished_req(o, kv_len_to_handle=committed)
        else:
            self.sg.common.release_kv_cache(s, self.tree, checkpoint=True)
            if self.rng.random() < 0.5:
                self.ours.cache_finished_req(o)
            else:
                self.ours.release_kv_cache(o, checkpoint=True)

    def abort(self, where: str) -> None:
        if not self.running:
            return
        s, o = self.running.pop(self.rng.randrange(len(self.running)))
        STATS["aborts"] += 1
        self.sg.common.release_kv_cache(s, self.tree, checkpoint=False)
        self.ours.cache_finished_req(o, is_insert=False)

    # --- decode ----------------------------------------------------------------------------
    def sg_check(self, reqs: list[SGReq]) -> bool:
        ps = self.page
        need = sum(1 for r in reqs if r.kv.kv_committed_len % ps == 0) * ps
        return self.sg_alloc.check_decode_capacity(num_tokens=need, tree_cache=self.tree)

    def sg_retract(self) -> tuple[list[int], float]:
        """ScheduleBatch.retract_decode (no beams, no priority retraction), transcribed."""
        reqs = [s for s, _ in self.running]
        order = sorted(range(len(reqs)), reverse=True,
                       key=lambda i: (len(reqs[i].output_ids), -len(reqs[i].origin_input_ids)))
        out, first = [], True
        while first or not self.sg_check([reqs[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            idx = order.pop()
            self.sg.common.release_kv_cache(reqs[idx], self.tree, checkpoint=False)
            self.sg.common.evict_from_tree_cache(self.tree, len(order) * RETRACT_STEPS)
            reqs[idx].reset_for_retract()
            out.append(idx)
        kept = [reqs[i] for i in sorted(order)]
        decoded = sum(len(r.output_ids) for r in kept)
        total = sum(r.max_new_tokens for r in kept)
        return out, min(1.0, (decoded + RETRACT_STEPS * len(kept)) / (total + 1))

    def decode(self, where: str) -> None:
        if not self.running:
            return
        ours = [o for _, o in self.running]
        a = self.sg_check([s for s, _ in self.running])
        b = adm.check_decode_mem(self.ours, self.alloc, ours)
        assert a == b, f"{where}: check_decode_mem {a} != {b}"
        self.compare(where + " after the decode check")
        if not a:
            gone, ratio = self.sg_retract()
            kept, retracted, our_ratio = adm.retract_decode(self.ours, self.alloc, ours)
            assert [self.running[i][1].rid for i in gone] == [r.rid for r in retracted], \
                f"{where}: retracted differ"
            assert ratio == our_ratio, f"{where}: new_token_ratio {ratio} != {our_ratio}"
            self.waiting += [self.running[i] for i in gone]
            STATS["retractions"] += len(gone)
            self.running = [p for p in self.running if p[1] in kept]
        ps = self.page
        STATS["decode_steps"] += 1
        self.sg.common.evict_from_tree_cache(self.tree, len(self.running) * ps)
        for s, _ in self.running:
            c = s.kv.kv_committed_len
            s.tree_row[c] = self.sg_alloc.slots.alloc_extend(int(s.tree_row[c - 1]), 1)[0]
            s.kv.kv_committed_len = s.kv.kv_allocated_len = c + 1
        adm.alloc_for_decode(self.ours, self.alloc, [o for _, o in self.running])
        still = []
        for s, o in self.running:
            self.sample(s, o)
            if len(o.output_ids) >= o.max_new_tokens:
                self.finish(s, o)
            else:
                still.append((s, o))
        self.running = still

    # --- compare ---------------------------------------------------------------------------
    def compare(self, where: str) -> None:
        assert self.sg_freed == self.our_freed, \
            f"{where}: slots freed\n  SGLang {self.sg_freed}\n  ours   {self.our_freed}"
        assert self.sg_evicted == self.our_evicted, \
            f"{where}: evicted\n  SGLang {self.sg_evicted}\n  ours   {self.our_evicted}"
        self.sg_freed.clear(), self.our_freed.clear()
        self.sg_evicted.clear(), self.our_evicted.clear()
        t, o = self.tree, self.ours
        assert (t.evictable_size(), t.protected_size(), self.sg_alloc.available_size()) == (
            o.evictable_size(), o.protected_size(), self.alloc.available_size()), \
            f"{where}: sizes differ"
        assert shape(t.root_node) == shape(o.root_node), f"{where}: trees differ"
        live = self.running + ([self.chunked] if self.chunked else [])
        for s, r in live:
            assert s.row() == r.slot_ids, f"{where}: {r.rid}'s row differs"
            assert (s.kv.cache_protected_len, s.kv.cache_inserted_len) == (
                r.cache_protected_len, r.cache_inserted_len), f"{where}: {r.rid}'s lengths"
        o.check_invariants()


def run(sg, seed: int, page: int, policy: str, num_ops: int) -> int:
    p = Pair(sg, seed, page, policy)
    for i in range(num_ops):
        op = p.rng.choice(["admit"] * 4 + ["decode"] * 5 + ["abort"])
        where = f"{p.label}, op {i} ({op})"
        getattr(p, op)(where)
        p.compare(where)
    return num_ops


def main() -> int:
    ap = wheel_parser(__doc__, "sglang", seeds=40)
    ap.add_argument("--ops", type=int, default=60, help="lifecycle ops per run")
    args = wheel_args(ap, "sglang/srt/mem_cache/common.py")
    sg = load_lifecycle(args.root)
    cases = itertools.product(POLICIES, (1, 16), range(args.seeds))
    ops, failures = run_seeds(lambda policy, page, seed: run(sg, seed, page, policy, args.ops),
                              cases)
    print("exercised:", ", ".join(f"{k} {v:,}" for k, v in STATS.items()))
    print(f"{ops:,} request-level ops compared, {failures} mismatching runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
