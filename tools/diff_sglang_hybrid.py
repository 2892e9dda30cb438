"""Differential check of our UnifiedRadixCache with SWA and MAMBA against SGLang 0.5.23's own
(not a test): its UnifiedRadixCache over the Rust and the Python TreeCore, its allocators and
pools on CPU (tools/sglang_hybrid.py), its common.py and allocation.py driving randomized request
lifecycles beside ours (radix/tree/hybrid_lifecycle.py): match with copy-on-write, lock, Mamba
capacity and slots, extend with eviction of the shortfall, chunked prefill checkpoints, Mamba
tracking (extra_buffer, no_buffer), decode with SWA window frees and the early SWA lock
release, decode-capacity retraction, finish, abort. Compared after every op: the hits (prefix,
mamba_branching_seqlen, swa_branching_seqlen), the whole tree per component (slots or
tombstones; lock refs: FULL on the Rust core, every component on the Python core, whose nodes
are Python objects, with hit counts and priorities), the slots freed per pool (exact ids, in
order), sizes per component, free slots per pool, each running request's row, lengths, SWA
cursor and Mamba slots.

    python tools/diff_sglang_hybrid.py /tmp/sgl/ex --seeds 40
    python tools/diff_sglang_hybrid.py /tmp/sgl/ex --kinds swa --break-rule swa_recovery

--kinds picks the configurations: swa (FULL+SWA), mamba (FULL+MAMBA, extra_buffer), nobuf
(FULL+MAMBA, no_buffer: page 1, no overlap), hybrid (FULL+SWA+MAMBA). --break-rule flips one rule
in ours (see BREAKS) to show that the check catches it.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hybrid_breaks  # noqa: E402
from hybrid_compare import compare_pair  # noqa: E402
from sglang_hybrid import SGReq, SGSide, fifo_pages  # noqa: E402
from sglang_unified import command_line  # noqa: E402
from wheels import run_seeds  # noqa: E402

from radix.request import Req, SlotAllocator  # noqa: E402
from radix.tree import hybrid_lifecycle as life  # noqa: E402
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator  # noqa: E402
from radix.tree.unified_radix_cache import UnifiedRadixCache  # noqa: E402

KINDS = {"swa": ("full", "swa"), "mamba": ("full", "mamba"), "nobuf": ("full", "mamba"),
         "hybrid": ("full", "swa", "mamba")}
POLICIES = ("lru", "lfu", "priority", "slru")
RETRACT_STEPS = 20
STATS: dict[str, int] = {}


class Counts:
    """An event sink that counts what our cache did (tombstones by cause, recoveries, ...)."""

    def emit(self, e) -> None:
        name = type(e).__name__
        if name == "ComponentTombstoned":
            name = f"{e.component} tombstoned ({e.cause})"
        elif name == "ComponentStored" and e.recovered:
            name = "swa recovered"
        elif name not in ("MambaStateCopied", "SlidingWindowFreed", "MambaStateTracked"):
            return
        STATS[name] = STATS.get(name, 0) + 1


def knobs_for(kind: str, core: str, page: int, policy: str, seed: int) -> SimpleNamespace:
    rng = random.Random(seed * 7919 + page)
    comps = KINDS[kind]
    mamba = "mamba" in comps
    chunk = rng.choice([4, 8]) if page == 1 else rng.choice([8, 16, 32])
    size = rng.randrange(120, 260) if page == 1 else rng.randrange(14, 24) * page
    return SimpleNamespace(
        components=comps, core=core, page=page, policy=policy, config={}, chunk=chunk,
        size=size, size_swa=(size * rng.choice([5, 7, 10]) // 10) // page * page,
        window=rng.choice([4, 8, 16]) * (1 if page == 1 else 2), width=640,
        mamba_size=rng.randrange(18, 30), extra_buffer=kind != "nobuf", overlap=kind != "nobuf",
        max_states_per_path=rng.choice([-1, -1, 1, 2, 3]) if mamba else -1,
        track_interval=page * rng.choice([1, 2]) if page > 1 else rng.choice([4, 8, 16]),
        swa_interval=rng.choice([1, 2, 8]), release_prefill_swa=rng.random() < 0.5,
        prefix_len=60 if page == 1 else 120)


class Pair:
    """SGLang's side and ours, fed the same requests and tokens."""

    def __init__(self, usg, k: SimpleNamespace, seed: int) -> None:
        self.rng, self.k = random.Random(seed), k
        self.sg = SGSide(usg, k)
        self.sg_freed: dict[str, list] = {"full": [], "swa": [], "mamba": []}
        self.our_freed: dict[str, list] = {"full": [], "swa": [], "mamba": []}
        self._log_sglang()
        self.ours = self._our_cache()
        self.knobs = life.SchedulerKnobs(
            mamba_track_interval=k.track_interval, enable_overlap_schedule=k.overlap,
            swa_eviction_interval=k.swa_interval, release_prefill_swa=k.release_prefill_swa)
        self.prefixes = [[self.rng.randrange(3) for _ in range(self.rng.randrange(k.prefix_len))]
                         for _ in range(3)]
        self.waiting, self.running, self.chunked, self.num_reqs = [], [], None, 0
        self.admitted: set[str] = set()  # requests admitted at least once
        self.label = (f"{'+'.join(k.components)} {k.core} page {k.page} {k.policy} seed {seed}"
                      f" (window {k.window}, chunk {k.chunk}, extra {k.extra_buffer})")

    def _our_cache(self) -> UnifiedRadixCache:
        k = self.k
        swa = "swa" in k.components
        alloc = (SWASlotAllocator(k.size, k.size_swa, k.page) if swa
                 else SlotAllocator(k.size, page_size=k.page))
        pools = (alloc.full, alloc.swa) if swa else (alloc,)
        for name, pool in zip(("full", "swa"), pools):
            _log_free(pool, self.our_freed[name], k.page)
        mamba = MambaSlotPool(k.mamba_size) if "mamba" in k.components else None
        if mamba is not None:
            _log_free(mamba, self.our_freed["mamba"], 1)
        return UnifiedRadixCache(
            k.components, page_size=k.page, eviction_policy=k.policy,
            sliding_window_size=k.window if swa else None, mamba_chunk_size=k.chunk,
            mamba_max_states_per_path=k.max_states_per_path,
            enable_mamba_extra_buffer=k.extra_buffer, allocator=alloc, mamba_pool=mamba,
            sink=Counts())

    def _log_sglang(self) -> None:
        a, ps = self.sg.pools.allocator, self.k.page
        pools = ((a.full_attn_allocator, a.swa_attn_allocator) if "swa" in self.k.components
                 else (a,))
        for name, pool in zip(("full", "swa"), pools):
            if ps > 1:
                fifo_pages(pool)
            _log_sg_free(pool, self.sg_freed[name], ps)
        if self.sg.mamba:
            m = self.sg.pools.req_to_token_pool.mamba_allocator
            free, log = m.free, self.sg_freed["mamba"]
            m.free = lambda idx: (log.extend(idx.tolist()), free(idx))

    # --- requests ------------------------------------------------------------------------
    def new_request(self) -> tuple:
        rng = self.rng
        self.num_reqs += 1
        toks = rng.choice(self.prefixes) + [rng.randrange(3) for _ in range(rng.randrange(1, 40))]
        n, pr = rng.randrange(1, 30), rng.randrange(3)
        ek = rng.choice([None, None, "lora"])
        rid = f"r{self.num_reqs}"
        return SGReq(rid, toks, n, ek, None, pr), Req(rid, toks, max_new_tokens=n, extra_key=ek,
                                                      priority=pr)

    def admit(self, where: str) -> None:
        if self.chunked is not None:
            s, o = self.chunked
            if self._fits(len(s.full_untruncated_fill_ids) - s.kv.kv_committed_len, False):
                self.extend(s, o, where)
            return
        if self.sg.mamba and self._mamba_room() < 6:
            return  # a match's copy-on-write needs a slot (the server caps running requests)
        pair = (self.waiting.pop(0) if self.waiting and self.rng.random() < 0.5
                else self.new_request())
        s, o = pair
        m = self.sg.match(s)
        ours = life.match_kv_cache(self.ours, o)
        got = (m.device_prefix_len, m.mamba_branching_seqlen, m.swa_branching_seqlen)
        want = (ours.prefix_len, ours.mamba_branching_seqlen, ours.swa_branching_seqlen)
        assert got == want, f"{where}: hit (prefix, mamba, swa branching) {got} != {want}"
        _count("matched tokens", m.device_prefix_len)
        self.sg.lock(s)
        life.lock_match(self.ours, o)
        extend = len(s.full_untruncated_fill_ids) - s.prefix_len
        if len(self.running) >= 5 or not self._fits(extend, True):
            self.sg.unlock(s)
            life.unlock_match(self.ours, o)
            self.waiting.append(pair)
            return
        _count("admissions")
        self.admitted.add(s.rid)
        self.sg.admit(s)
        life.alloc_req_slots(self.ours, o, self.knobs)
        self.extend(s, o, where)

    def _fits(self, extend: int, new: bool) -> bool:
        """Room for the extend in every pool after eviction, the match locked (the adder's
        budget, simplified: the same on both sides)."""
        t, a, ps = self.sg.tree, self.sg.pools.allocator, self.k.page
        demand = extend + 2 * ps
        if "swa" in self.k.components:
            if a.swa_available_size() + t.tree_core.component_evictable_size(_ct("swa")) < demand:
                return False
            if a.full_available_size() + t.full_evictable_size() < demand:
                return False
        elif a.available_size() + t.full_evictable_size() < demand:
            return False
        return not self.sg.mamba or self._mamba_room() >= (5 if new else 2)

    def _mamba_room(self) -> int:
        m = self.sg.pools.req_to_token_pool.mamba_allocator
        return m.available_size() + self.sg.tree.tree_core.component_evictable_size(
            _ct("mamba"))

    def extend(self, s, o, where: str) -> None:
        fill = s.full_untruncated_fill_ids
        start, ps = s.kv.kv_committed_len, self.k.page
        end = len(fill)
        if self.rng.random() < 0.3:
            cut = (start + self.rng.randrange(1, 40)) // ps * ps
            end = cut if start < cut < end else end
        self.sg.extend(s, end)
        life.extend(self.ours, o, end)
        if end < len(fill):
            _count("chunks")
            self.chunked = (s, o)
            return
        self.chunked = None
        token = self.rng.randrange(3)
        done = self.sg.prefill_done(s, token)
        assert done == life.prefill_done(self.ours, o, token), f"{where}: finish differs"
        if done:
            _count("finishes")
        else:
            self.running.append((s, o))

    def abort(self, where: str) -> None:
        if not self.running:
            return
        s, o = self.running.pop(self.rng.randrange(len(self.running)))
        _count("aborts")
        self.sg.release(s, checkpoint=False)
        self.ours.release_kv_cache(o, checkpoint=False)

    def decode(self, where: str) -> None:
        if not self.running:
            return
        ok = self.sg.check_decode([s for s, _ in self.running])
        assert ok == life.check_decode_capacity(self.ours, [o for _, o in self.running]), \
            f"{where}: decode capacity differs"
        if not ok:
            self._retract(where)
        tokens = [self.rng.randrange(3) for _ in self.running]
        self.sg.decode([s for s, _ in self.running], tokens)
        it = iter(tokens)
        life.decode_step(self.ours, [o for _, o in self.running], self.knobs, lambda r: next(it))
        _count("decode steps")
        still = []
        for s, o in self.running:
            if s.finished():
                _count("finishes")
                self.sg.release(s, checkpoint=True)
                self.ours.release_kv_cache(o, checkpoint=True)
            else:
                still.append((s, o))
        self.running = still

    def _retract(self, where: str) -> None:
        """ScheduleBatch.retract_decode's loop (no beams, no priority), transcribed."""
        order = sorted(range(len(self.running)), reverse=True, key=lambda i: (
            len(self.running[i][0].output_ids), -len(self.running[i][0].origin_input_ids)))
        gone, first = [], True
        while first or not self.sg.check_decode([self.running[i][0] for i in order]):
            assert first or not life.check_decode_capacity(
                self.ours, [self.running[i][1] for i in order]), f"{where}: retract check"
            if len(order) == 1:
                break
            first = False
            i = order.pop()
            s, o = self.running[i]
            self.sg.release(s, checkpoint=False)
            life.retract(self.ours, o)
            self.sg.common.evict_from_tree_cache(self.sg.tree, len(order) * RETRACT_STEPS)
            life.evict_to_free_tokens(self.ours, len(order) * RETRACT_STEPS)
            gone.append(i)
        _count("retractions", len(gone))
        for i in gone:
            s, o = self.running[i]
            self.waiting.append((SGReq(s.rid, s.origin_input_ids, s.max_new_tokens, s.extra_key,
                                       None, s.priority), o))
            self.waiting[-1][0].output_ids.extend(s.output_ids)
            self.waiting[-1][0].refresh_fill_ids()
        self.running = [p for j, p in enumerate(self.running) if j not in gone]

    def compare(self, where: str) -> None:
        compare_pair(self, where)


def _ct(name: str):
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    return ComponentType[name.upper()]


def _log_sg_free(pool, log: list, ps: int) -> None:
    """SGLang's pool: a paged one logs the pages it releases; a token one what it frees
    (outside a free group, which frees it again at the group's end)."""
    if ps > 1:
        release = pool._release_page_ids
        pool._release_page_ids = lambda *ids: (
            log.extend(i for t in ids for i in t.tolist()), release(*ids))
    else:
        free = pool.free
        pool.free = lambda idx: (pool.free_group is None and log.extend(idx.tolist()),
                                 free(idx))


def _log_free(pool, log: list, ps: int) -> None:
    free = pool.free
    if ps == 1:
        pool.free = lambda ids: (log.extend(ids), free(ids))[1]
    else:
        pool.free = lambda ids: (log.extend(dict.fromkeys(i // ps for i in ids)), free(ids))[1]


def _count(name: str, n: int = 1) -> None:
    STATS[name] = STATS.get(name, 0) + n


def run(usg, kind: str, core: str, page: int, policy: str, seed: int, num_ops: int) -> int:
    p = Pair(usg, knobs_for(kind, core, page, policy, seed), seed)
    for i in range(num_ops):
        op = p.rng.choice(["admit"] * 4 + ["decode"] * 5 + ["abort"])
        where = f"{p.label}, op {i} ({op})"
        getattr(p, op)(where)
        p.compare(where)
    return len(p.admitted)


def main() -> int:
    def own(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--ops", type=int, default=80, help="lifecycle ops per run")
        ap.add_argument("--kinds", default=",".join(KINDS))

    args, usg = command_line(__doc__, 40, POLICIES, hybrid_breaks.BREAKS, own)
    failed = 0
    for kind, core, policy, page in itertools.product(
            args.kinds.split(","), args.cores.split(","), args.policies.split(","),
            [int(x) for x in args.pages.split(",")]):
        if kind == "nobuf" and page > 1:
            continue  # SGLang: no_buffer only supports page_size=1
        reqs, fails = run_seeds(lambda seed, k=kind, c=core, po=policy, pg=page: run(
            usg, k, c, pg, po, seed, args.ops), [(s,) for s in range(args.seeds)])
        failed += fails
        print(f"{kind:6} {core:6} core  page {page:2}  {policy:8}  {reqs:6,} requests admitted  "
              f"{fails} mismatching runs of {args.seeds}", flush=True)
    print("exercised:", ", ".join(f"{k} {v:,}" for k, v in sorted(STATS.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
