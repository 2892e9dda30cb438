"""Differential check of radix/hosttier against SGLang 0.5.23's UnifiedRadixCache with HiCache on
(not a test).

SGLang's cache is built on CPU as tools/sglang_unified.py builds it (FULL component, Rust or
Python TreeCore), then given what `init_hicache` would give it, with only the transfers stubbed:
a controller whose `write` takes host slots from a host index pool and whose `load` takes device
slots from the device allocator, each acked at once (synchronous transfers), and a host pool
group that frees host slots. Everything else is SGLang's own code: match in HiCache mode,
init_load_back / load_back with its threshold, evict_for_alloc with demotion, write-back backup
or drop, evict_host with duplicate reclaim, host locks, insert with restore and write-through.

Each request runs SGLang's scheduler steps on both sides (ours: radix.hosttier.serve_request):
match prompt[:-1], init_load_back (+ loading_check), lock, evict the allocation shortfall,
allocate, then finish as 0.5.23's scheduler does, through release_kv_cache(checkpoint=True):
SGLang's own `UnifiedRadixCache.checkpoint` of the finished request (insert the whole sequence
from the locked prefix, then the prompt alone with priority + 1, splitting the leaf at the
prompt boundary; + writing_check), free the tail, unlock (`--finish insert`: SGLang's side
inserts the whole sequence only, which ours no longer matches). With `--lifecycle chunked`
(issue 20 item 4) up to three requests run at once, interleaved: each is admitted as above
(allocating prompt + output), prefilled in random chunks with SGLang's own
`UnifiedRadixCache.checkpoint` after each (cache_unfinished_req; ours:
radix.hosttier.requests.checkpoint_request), and then finished or, one step in eight, retracted
(release_kv_cache(checkpoint=False); ours: retract_request); each running request's row,
cache_protected_len and cache_inserted_len are compared too. Compared after every request
(chunked: every step): the hit split (device / loaded back), the tree (per node: device slot
ids, host residency and length, lock_ref, host_lock_ref; with the Python core also hit counts
and priorities), device slots freed, evicted / demoted / loaded / host-evicted token counts,
sizes, free device and host tokens.

    python tools/diff_sglang_hicache.py /tmp/sgl/ex --seeds 20 --requests 120
    python tools/diff_sglang_hicache.py /tmp/sgl/ex --break-rule no_demote   # must mismatch
    python tools/diff_sglang_hicache.py /tmp/sgl/ex --lifecycle chunked --seeds 20 --requests 100
    python tools/diff_sglang_hicache.py /tmp/sgl/ex --lifecycle chunked --break-rule checkpoint_hits
    python tools/diff_sglang_hicache.py /tmp/sgl/ex --lifecycle chunked --break-rule finish_reinsert
    python tools/diff_sglang_hicache.py /tmp/sgl/ex --finish insert  # SGLang's side without its
        # prompt-boundary re-insert (the whole sequence inserted directly): must mismatch
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hicache_stubs import SGSide, sg_shape  # noqa: E402
from sglang_unified import command_line  # noqa: E402
from wheels import run_seeds  # noqa: E402

from radix.hosttier import HostTierCache, host_token_capacity  # noqa: E402
from radix.hosttier.requests import (  # noqa: E402
    Running,
    admit_request,
    checkpoint_request,
    finish_running,
    retract_request,
    serve_request,
)
from radix.request import SlotAllocator  # noqa: E402

POLICIES = ("lru", "lfu", "slru", "priority", "tlru")
WRITE = ("write_through", "write_through_selective", "write_back")
STATS = {"requests": 0, "host_hits": 0, "loaded": 0, "demoted": 0, "host_evicted": 0,
         "dropped": 0, "checkpoints": 0, "retracted": 0}


def our_shape(node, rich: bool, root: bool = True, rust: bool = False) -> tuple:
    """(device slots, host copy, lock_ref, host_lock_ref, [hit count, priority,] children); the
    Rust core's readers give the host copy as a flag and no host lock refs."""
    slots = () if root or node.value is None else tuple(node.value)
    if rust:
        host = None if root else node.host_value is not None
    else:
        host = None if root or node.host_value is None else len(node.host_value)
    kids = tuple(sorted((our_shape(c, rich, False, rust) for c in node.children.values()),
                        key=repr))
    hlock = None if root or rust else node.host_lock_ref
    head = (slots, host, None if root else node.lock_ref, hlock)
    return head + ((node.hit_count, node.priority) if rich and not root else ()) + (kids,)


def workload(rng: random.Random, size: int, page: int):
    """Requests over a few shared prefixes and a few follow-ups each, so prompts come back
    after they were pushed out of the device."""
    roots = [[rng.randrange(4) for _ in range(rng.randrange(4, size // 3))] for _ in range(3)]
    tails = [[rng.randrange(4) for _ in range(rng.randrange(1, size // 4))] for _ in range(6)]
    while True:
        prompt = rng.choice(roots) + rng.choice(tails) + [rng.randrange(4)] * rng.randrange(2)
        prompt = prompt[: size - 8]
        yield prompt, [rng.randrange(4) for _ in range(rng.randrange(0, 4))], rng.randrange(3)


def setup(usg, core: str, seed: int, page: int, policy: str, write: str):
    """One configuration's pair: (rng, SGLang side, ours, the slots ours freed, label)."""
    rng = random.Random(seed * 31 + page)
    size = rng.randrange(40, 160) if page == 1 else rng.randrange(6, 15) * page
    host = host_token_capacity(size, rng.choice((1.0, 2.0, 4.0)), page)
    config = ({"threshold": rng.randrange(0, 40), "next_prompt_estimate": rng.randrange(0, 20)}
              if policy == "tlru" else {})
    sg = SGSide(usg, core, size, host, page, policy, write, config)
    ours = HostTierCache(SlotAllocator(size, page_size=page), host, write, page, policy, config)
    ours_freed: list[int] = []
    free = ours.allocator.free
    ours.allocator.free = lambda ids: (ours_freed.extend(ids), free(ids))[1]
    label = f"{core} core, page {page}, {policy}, {write}, seed {seed} ({size}/{host} slots)"
    return rng, sg, ours, ours_freed, label


class Checker:
    """Compares the two sides after each step: tier moves, slots freed, tree, sizes."""

    def __init__(self, sg: SGSide, ours: HostTierCache, ours_freed: list, core: str) -> None:
        self.sg, self.ours, self.ours_freed, self.core = sg, ours, ours_freed, core
        self.before = ours.counts()

    def __call__(self, where: str) -> None:
        sg, ours = self.sg, self.ours
        now, before = ours.counts(), self.before
        moved = (now.demoted - before.demoted, now.loaded_back - before.loaded_back,
                 now.host_evicted + now.reclaimed - before.host_evicted - before.reclaimed,
                 now.dropped_unbacked + now.dropped_host_pressure
                 - before.dropped_unbacked - before.dropped_host_pressure)
        sg_moved = sg.moved()
        assert sg_moved == moved, f"{where}: (demoted, loaded, host evicted, dropped) " \
                                  f"SGLang {sg_moved}, ours {moved}"
        self.before = now
        assert sg.freed == self.ours_freed, \
            f"{where}: freed\n SGLang {sg.freed}\n ours {self.ours_freed}"
        sg.freed.clear()
        self.ours_freed.clear()
        rich = self.core == "python"
        a, b = sg_shape(sg, rich), our_shape(ours.root_node, rich, rust=self.core == "rust")
        assert a == b, f"{where}: trees differ\n  SGLang {a}\n  ours   {b}"
        assert sg.sizes() == (ours.evictable_size_, ours.protected_size_,
                              ours.allocator.available_size(), ours.host.available_size()), \
            f"{where}: sizes SGLang {sg.sizes()}"
        ours.check_invariants()
        for k, v in zip(("demoted", "loaded", "host_evicted", "dropped"), moved, strict=True):
            STATS[k] += v


def run(usg, core: str, seed: int, page: int, policy: str, write: str, num: int,
        finish: str = "release") -> int:
    """Whole requests, one at a time (serve_request on ours, SGSide.serve on SGLang's)."""
    rng, sg, ours, ours_freed, label = setup(usg, core, seed, page, policy, write)
    check = Checker(sg, ours, ours_freed, core)
    gen = workload(rng, sg.alloc_size, page)
    for i in range(num):
        prompt, output, prio = next(gen)
        where = f"{label}, request {i}"
        got_sg = sg.serve(prompt, output, prio, finish)
        got = serve_request(ours, prompt, output, prio)
        assert got_sg == tuple(got[:3]), f"{where}: hits (device, host, miss) SGLang {got_sg}, " \
                                         f"ours {tuple(got[:3])}"
        check(where)
        STATS["requests"] += 1
        STATS["host_hits"] += got.host_hit > 0
    return num


def run_chunked(usg, core: str, seed: int, page: int, policy: str, write: str,
                num: int, finish: str = "release") -> int:
    """`num` requests, up to three at once, interleaved: each is admitted (match prompt[:-1],
    load back, lock, evict the shortfall, allocate prompt + output), prefilled in chunks with a
    checkpoint after each (SGLang's own `checkpoint`, ours checkpoint_request), and either
    finished (release_kv_cache(checkpoint=True): SGLang's checkpoint of the whole sequence with
    the prompt-boundary re-insert, tail freed, unlock; ours finish_running) or, one in eight steps,
    retracted mid-way (release_kv_cache(checkpoint=False): its own slots freed, lock dropped;
    it is not resubmitted). Compared after every step."""
    rng, sg, ours, ours_freed, label = setup(usg, core, seed, page, policy, write)
    check = Checker(sg, ours, ours_freed, core)
    gen = workload(rng, sg.alloc_size, page)
    live: list[list] = []  # [sglang req, our Running, prompt, tokens, computed]
    started = step = 0
    while started < num or live:
        step += 1
        if started < num and (len(live) < 3 and (not live or rng.random() < 0.4)):
            prompt, output, prio = next(gen)
            where = f"{label}, step {step} (admit request {started})"
            started += 1
            tokens = prompt + output
            s_req, got_sg = sg.admit(prompt, len(tokens), prio)
            adm = admit_request(ours, prompt, len(tokens), prio)
            got = (0, 0, len(prompt)) if adm is None else tuple(adm.served[:3])
            assert got_sg == got, f"{where}: hits (device, host, miss) SGLang {got_sg}, " \
                                  f"ours {got}"
            assert (s_req is None) == (adm is None), f"{where}: admitted differently"
            STATS["requests"] += 1
            STATS["host_hits"] += got[1] > 0
            if adm is not None:
                live.append([s_req, Running.admitted(adm), prompt, tokens, adm.served[0]
                             + adm.served[1]])
            check(where)
            continue
        if not live:
            continue
        i = rng.randrange(len(live))
        s_req, run, prompt, tokens, done = live[i]
        if rng.random() < 0.125:
            where = f"{label}, step {step} (retract)"
            sg.retract(s_req)
            retract_request(ours, run)
            del live[i]
            STATS["retracted"] += 1
        elif done < len(prompt):
            up_to = min(len(prompt), done + rng.randrange(1, 3 * page + 2))
            where = f"{label}, step {step} (checkpoint at {up_to})"
            if up_to - up_to % page > run.protected:
                sg.checkpoint(s_req, tokens, up_to)
                checkpoint_request(ours, run, tokens, up_to)
                STATS["checkpoints"] += 1
            live[i][4] = up_to
        else:
            where = f"{label}, step {step} (finish)"
            (sg.release if finish == "release" else sg.finish)(s_req, tokens)
            finish_running(ours, run, tokens)
            del live[i]
        check(where)
        for s_req, run, *_ in live:
            assert s_req.kv.row.tolist() == run.row, f"{where}: a running request's row"
            assert (s_req.kv.cache_protected_len, s_req.kv.cache_inserted_len) == (
                run.protected, run.inserted), f"{where}: a running request's lengths"
    return num


def _break_no_demote() -> None:
    """Device eviction drops backed-up leaves instead of demoting them."""
    from radix.hosttier import moves
    moves.TierMoves._demote = lambda self, x: self._delete_device_leaf(x, "host_pressure")


def _break_threshold() -> None:
    """write_through_selective backs up on the first hit, as write_through does."""
    from radix.hosttier import cache, capacity
    cache.write_through_threshold = lambda policy: 1
    capacity.write_through_threshold = cache.write_through_threshold


def _break_load_threshold() -> None:
    """Loads back host hits of any length (SGLang declines those under 10 tokens)."""
    from radix.hosttier import cache
    cache.LOAD_BACK_THRESHOLD = 1
    init = cache.HostTierCache.__init__
    cache.HostTierCache.__init__ = lambda self, *a, **k: init(self, *a, **k) or setattr(
        self, "load_back_threshold", 1)


def _break_checkpoint_hits() -> None:
    """A checkpoint forgets how far the request's inserts went (cache_inserted_len), so every
    chunk counts a hit on the nodes the earlier chunks made; only --lifecycle chunked has
    more than one insert per request to see it."""
    from radix.hosttier import requests
    checkpoint = requests.checkpoint_request

    def broken(cache, run, tokens, up_to):
        kept, run.inserted = run.inserted, 0  # the insert sees 0; the record stays right
        checkpoint(cache, run, tokens, up_to)
        run.inserted = max(run.inserted, kept)

    requests.checkpoint_request = broken
    globals()["checkpoint_request"] = broken


def _break_retract_keeps_lock() -> None:
    """Retraction frees the request's slots but leaves its lock on the tree."""
    from radix.hosttier import requests

    def broken(cache, run):
        if run.protected < len(run.row):
            cache.allocator.free(run.row[run.protected:])

    requests.retract_request = broken
    globals()["retract_request"] = broken


def _break_finish_reinsert() -> None:
    """A finish inserts the whole sequence only: no prompt re-insert with priority + 1, so no
    split at the prompt boundary and the prompt's nodes keep the request's priority."""
    from radix.hosttier import requests
    requests.prompt_boundary_priority = lambda prompt_len, n, priority: None


BREAKS = {"no_demote": _break_no_demote, "threshold": _break_threshold,
          "load_threshold": _break_load_threshold, "checkpoint_hits": _break_checkpoint_hits,
          "retract_keeps_lock": _break_retract_keeps_lock,
          "finish_reinsert": _break_finish_reinsert}


def main() -> int:
    def own(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--requests", type=int, default=120, help="requests per run")
        ap.add_argument("--writes", default=",".join(WRITE))
        ap.add_argument("--lifecycle", default="whole", choices=("whole", "chunked"),
                        help="whole: one request at a time; chunked: interleaved requests "
                             "prefilled in chunks with checkpoints, some retracted")
        ap.add_argument("--finish", default="release", choices=("release", "insert"),
                        help="SGLang's finish: release (0.5.23's scheduler: release_kv_cache "
                             "with its checkpoint, the prompt re-inserted with priority + 1) or "
                             "insert (the whole sequence only, no prompt-boundary split; ours "
                             "always splits, so this must mismatch)")

    args, usg = command_line(__doc__, 20, POLICIES, BREAKS, own)
    failed = 0
    drive = functools.partial(run_chunked if args.lifecycle == "chunked" else run,
                              finish=args.finish)
    for core, write, policy, page in itertools.product(
            args.cores.split(","), args.writes.split(","), args.policies.split(","),
            [int(x) for x in args.pages.split(",")]):
        reqs, fails = run_seeds(lambda seed, c=core, w=write, po=policy, pg=page: drive(
            usg, c, seed, pg, po, w, args.requests), [(s,) for s in range(args.seeds)])
        failed += fails
        print(f"{core:6} core  {write:24} page {page:2}  {policy:8}  {reqs:6,} requests  "
              f"{fails} mismatching runs of {args.seeds}", flush=True)
    print("exercised:", ", ".join(f"{k} {v:,}" for k, v in STATS.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(SimpleNamespace(main=main).main())
