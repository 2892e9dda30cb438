"""Differential check of radix.sched.policy.SchedulePolicy against SGLang's own (not a test).

Loads schedule_policy.py and mem_cache/common.py from an unpacked SGLang wheel (checked with
0.5.23) on top of tools/diff_sglang.py's RadixCache loader, with the heavy modules stubbed and a
small stand-in for SGLang's Req. Random warm trees (shared prefixes over a 3-token vocabulary,
pages 1 and 4, namespaces) and random waiting queues (some longer than 128) go through both
calc_priority calls for three rounds, for every policy, with and without priority scheduling,
in-batch thresholds 32/32, 4/4 and -1/4 (off). Compared each round: the order, the active
policy, each request's capped match, the deprioritized set, the trees, the access-time order.

    python tools/diff_sglang_schedule.py /tmp/sgl/ex --seeds 30
"""

from __future__ import annotations

import itertools
import random
import sys
import types
from array import array
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diff_sglang import load_sglang, shape  # noqa: E402
from wheels import load, mocks, packages, run_seeds, wheel_args, wheel_parser  # noqa: E402

from radix.request import Req  # noqa: E402
from radix.sched.policy import POLICIES, SchedulePolicy  # noqa: E402
from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

STATS = {"deprioritized": 0, "fallback": 0, "matched": 0}  # rounds where each one happened
ENV_DEFAULTS = {"SGLANG_RADIX_FORCE_MISS": False, "SGLANG_EXACT_CHUNK_FILL": False,
                "SGLANG_PREFILL_TILE_BUDGET": 0, "SGLANG_PREFILL_TILE_BUDGET_MODE": "compact",
                "SGLANG_ENABLE_WAITING_PREFIX_REFRESH": True}


def load_schedule(root: Path):
    """(radix_cache module, base module, params module, schedule_policy module)."""
    radix, base, params = load_sglang(root)
    src = root / "sglang" / "srt"
    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = SimpleNamespace(**{k: SimpleNamespace(get=lambda v=v: v)
                                      for k, v in ENV_DEFAULTS.items()})
    sys.modules[environ.__name__] = environ
    utils = sys.modules["sglang.srt.utils"]
    utils.get_bool_env_var = lambda name, default="false": False
    utils.is_hip = utils.is_gfx95_supported = lambda: False
    ctx = mock.MagicMock(name="sglang.srt.runtime_context")
    ctx.get_disagg.return_value.disaggregation_mode = "null"
    ctx.get_memory.return_value.radix_eviction_policy = "lru"
    sys.modules[ctx._mock_name] = ctx
    mocks("sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.memory",
          "sglang.kernels.ops.memory.common", "sglang.srt.managers.prefill_delayer",
          "sglang.srt.dllm", "sglang.srt.dllm.config", "sglang.srt.managers.schedule_batch",
          "sglang.srt.mem_cache.allocator.hisparse",
          "sglang.srt.mem_cache.allocator.page_interleave", "sglang.srt.mem_cache.allocator.swa",
          "sglang.srt.mem_cache.allocator.unified_hybrid_swa",
          "sglang.srt.mem_cache.allocator.unified_mamba", "sglang.srt.mem_cache.hicache_storage",
          "sglang.srt.mem_cache.unified_cache.components",
          "sglang.srt.mem_cache.unified_radix_cache", "sglang.srt.model_executor",
          "sglang.srt.model_executor.encoder_swa_replay")
    packages("sglang.srt.managers")
    load("sglang.srt.mem_cache.common", src / "mem_cache/common.py")
    policy = load("sglang.srt.managers.schedule_policy", src / "managers/schedule_policy.py")
    return radix, base, params, policy


class SGReq:
    """The attributes of SGLang's Req that SchedulePolicy and match_kv_cache read or write."""

    def __init__(self, r: Req) -> None:
        self.rid, self.extra_key, self.cache_salt = r.rid, r.extra_key, r.cache_salt
        self.origin_input_ids = array("q", r.origin_input_ids)
        self.output_ids = array("q", r.output_ids)
        self.priority, self.routing_key = r.priority, r.routing_key
        self.time_stats = SimpleNamespace(wait_queue_entry_time=r.arrival)
        self.sampling_params = SimpleNamespace(max_new_tokens=r.max_new_tokens, ignore_eos=False)
        self.kv = SimpleNamespace(cache_protected_len=0)
        self.prefix_len = self.num_matched_prefix_tokens = 0

    def _compute_max_prefix_len(self, input_len: int) -> int:  # no logprobs, no dllm
        return max(input_len - 1, 0)


def access_ranks(node, out=None) -> list[int]:
    """Dense ranks of last_access_time over the tree in key order (clocks differ, order not)."""
    times = [] if out is None else out
    times.append(node.last_access_time)
    for child in sorted(node.children.values(),
                        key=lambda c: (repr(c.key.extra_key), tuple(c.key.token_ids))):
        access_ranks(child, times)
    if out is None:
        index = {t: i for i, t in enumerate(sorted(set(times)))}
        return [index[t] for t in times]
    return times


def make_queue(rng: random.Random, prefixes: list[list[int]], n: int) -> list[Req]:
    queue = []
    for i in range(n):
        toks = rng.choice(prefixes) + [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
        out = [rng.randrange(3) for _ in range(rng.randrange(4))] if rng.random() < 0.2 else []
        queue.append(Req(f"r{i}", toks, out, max_new_tokens=rng.randrange(1, 64),
                         extra_key=rng.choice([None, None, None, "lora"]),
                         cache_salt=rng.choice([None] * 5 + ["t1"]), priority=rng.randrange(3),
                         arrival=float(rng.randrange(50)),
                         routing_key=rng.choice([None, "a", "b", "c"])))
    return queue


def run(mods, seed: int, page: int, policy: str, prio: tuple[bool, bool],
        thresholds: tuple[int, int]) -> int:
    radix, base, params, sp = mods
    rng = random.Random(seed)
    sp.IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD, sp.IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD \
        = thresholds
    sg = radix.RadixCache(params.CacheInitParams(
        disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None,
        page_size=page, eviction_policy="lru"))
    ours = RadixCache(page_size=page, eviction_policy="lru", flavor="classic")
    prefixes = [[rng.randrange(3) for _ in range(rng.randrange(0, 48))] for _ in range(5)]

    def insert(toks: list[int], ns: str | None, salt: str | None) -> None:
        aligned = toks[: len(toks) // page * page]
        sg.insert(base.InsertParams(key=radix.RadixKey(array("q", aligned), ns, cache_salt=salt)))
        ours.insert(RadixKey(toks, extra_key=ns, cache_salt=salt))

    for _ in range(rng.randrange(6)):  # warm the tree
        insert(rng.choice(prefixes) + [rng.randrange(3) for _ in range(rng.randrange(8))],
               rng.choice([None, None, "lora"]), None)
    n = rng.choice([rng.randrange(1, 24), rng.randrange(1, 24), rng.randrange(126, 136)])
    queue = make_queue(rng, prefixes, n)
    sg_queue = [SGReq(r) for r in queue]
    sg_pol = sp.SchedulePolicy(policy, sg, False, *prio)
    ours_pol = SchedulePolicy(
        policy, ours, check_threshold=thresholds[0], deprioritize_threshold=thresholds[1],
        enable_priority_scheduling=prio[0], schedule_low_priority_values_first=prio[1], seed=seed)
    seen: list[set] = []
    inner = sg_pol._compute_prefix_matches
    sg_pol._compute_prefix_matches = lambda q, p: seen.append(inner(q, p)) or seen[-1]
    running = [Req(f"run{i}", [0], routing_key=rng.choice([None, "a", "b"])) for i in range(3)]
    for rnd in range(3):
        where = f"seed {seed}, page {page}, {policy}, prio {prio}, thr {thresholds}, round {rnd}"
        seen.clear()
        active = sg_pol._determine_active_policy(sg_queue).value
        random.seed(seed + rnd)
        ours_pol._rng.seed(seed + rnd)
        sg_pol.calc_priority(sg_queue, SimpleNamespace(reqs=[SGReq(r) for r in running]))
        rep = ours_pol.calc_priority(queue, running)
        STATS["deprioritized"] += bool(rep.deprioritized)
        STATS["fallback"] += rep.notice is not None
        STATS["matched"] += any(rep.prefix_lens.values())
        assert rep.active_policy == active, f"{where}: active {active} != {rep.active_policy}"
        a, b = [r.rid for r in sg_queue], [r.rid for r in queue]
        assert a == b, f"{where}: order\n  sglang {a}\n  ours   {b}"
        if seen:
            lens = {r.rid: r.num_matched_prefix_tokens for r in sg_queue}
            assert lens == rep.prefix_lens, f"{where}: matches {lens} != {rep.prefix_lens}"
            assert seen[0] == rep.deprioritized, f"{where}: deprioritized {seen[0]} != " \
                f"{set(rep.deprioritized)}"
        assert shape(sg.root_node) == shape(ours.root_node), f"{where}: trees differ"
        assert access_ranks(sg.root_node) == access_ranks(ours.root_node), \
            f"{where}: access-time order differs"
        for _ in range(min(len(queue), rng.randrange(1, 4))):  # admit the head, cache its prompt
            r, _s = queue.pop(0), sg_queue.pop(0)
            insert(r.all_ids, r.extra_key, r.cache_salt)
        if not queue:
            return rnd + 1
    return 3


def main() -> int:
    args = wheel_args(wheel_parser(__doc__, "sglang", seeds=30),
                      "sglang/srt/managers/schedule_policy.py")
    mods = load_schedule(args.root)
    cases = itertools.product(POLICIES, ((False, False), (True, False), (True, True)),
                              ((32, 32), (4, 4), (-1, 4)), (1, 4), range(args.seeds))
    rounds, failures = run_seeds(
        lambda policy, prio, thresholds, page, seed: run(mods, seed, page, policy, prio,
                                                         thresholds), cases)
    print(f"{rounds:,} calc_priority rounds compared, {failures} mismatching runs; rounds with "
          f"a cached match {STATS['matched']:,}, in-batch deprioritization "
          f"{STATS['deprioritized']:,}, LPM's FCFS fallback {STATS['fallback']:,}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
