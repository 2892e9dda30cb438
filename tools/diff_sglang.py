"""Differential check of radix.tree.RadixCache against SGLang's own RadixCache (not a test).

Loads radix_cache.py, evict_policy.py, base_prefix_cache.py and cache_init_params.py from an
unpacked SGLang wheel (checked with 0.5.23), stubbing the heavy modules they import, then runs
random insert / match / lock / unlock / evict sequences on both caches, for every eviction policy
and page sizes 1, 2, 4, 16, comparing after every op: prefix lengths, tokens evicted, evictable
and protected sizes, and the whole tree (keys, namespaces, lock_ref, hit_count, priority).
Both clocks are counters that tick on every read, so time orders agree.

    pip download --no-deps sglang==0.5.23 -d /tmp/sgl
    unzip -q /tmp/sgl/sglang-*.whl -d /tmp/sgl/ex
    python tools/diff_sglang.py /tmp/sgl/ex --seeds 40
"""

from __future__ import annotations

import itertools
import random
import sys
import types
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wheels import load, mocks, packages, run_seeds, wheel_args, wheel_parser  # noqa: E402

from radix.tree.evict_policy import POLICIES as ALL_POLICIES  # noqa: E402
from radix.tree.key import RadixKey  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

# the classic class has no T-LRU (0.5.23 keeps its bookkeeping in the unified tree only)
POLICIES = tuple(p for p in ALL_POLICIES if p != "tlru")

STUBBED = ["allocator", "events", "memory_pool", "unified_cache.component_type"]


def load_sglang(root: Path):
    """(radix_cache module, base_prefix_cache module, cache_init_params module)."""
    src = root / "sglang" / "srt"
    packages("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.utils",
             "sglang.srt.mem_cache.unified_cache", "sglang.srt.observability")
    mocks(*[f"sglang.srt.mem_cache.{m}" for m in STUBBED],
          "sglang.srt.observability.metrics_collector", "sglang.srt.runtime_context",
          "sglang.srt.utils.common")
    policy = load("sglang.srt.mem_cache.evict_policy", src / "mem_cache/evict_policy.py")
    utils = types.ModuleType("sglang.srt.mem_cache.utils")
    factories = {"lru": policy.LRUStrategy, "lfu": policy.LFUStrategy,
                 "fifo": policy.FIFOStrategy, "mru": policy.MRUStrategy,
                 "filo": policy.FILOStrategy, "priority": policy.PriorityStrategy,
                 "slru": policy.SLRUStrategy}
    utils.get_eviction_strategy = lambda name, config=None: factories[name](**(config or {}))
    utils.split_node_hash_value = lambda h, s, p: (None, None)
    sys.modules[utils.__name__] = utils
    params = load("sglang.srt.mem_cache.cache_init_params", src / "mem_cache/cache_init_params.py")
    base = load("sglang.srt.mem_cache.base_prefix_cache", src / "mem_cache/base_prefix_cache.py")
    radix = load("sglang.srt.mem_cache.radix_cache", src / "mem_cache/radix_cache.py")
    ticks = [0.0]

    def monotonic() -> float:
        ticks[0] += 1.0
        return ticks[0]

    radix.time.monotonic = monotonic
    return radix, base, params


class NullAllocator:
    def free(self, slots) -> None: ...
    def free_segment(self, slots, start_pos: int = 0) -> None: ...


def shape(node) -> dict:
    """A tree as nested dicts: (tokens, namespace) -> (lock_ref, hit_count, priority, children)."""
    return {(tuple(c.key.token_ids), c.key.extra_key): (c.lock_ref, c.hit_count, c.priority,
                                                         shape(c))
            for c in node.children.values()}


def run(sg_mods, seed: int, page: int, policy: str, num_ops: int = 60) -> int:
    radix, base, params = sg_mods
    rng = random.Random(seed)
    sg = radix.RadixCache(params.CacheInitParams(
        disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None,
        page_size=page, eviction_policy=policy))
    sg.token_to_kv_pool_allocator = NullAllocator()
    ours = RadixCache(page_size=page, eviction_policy=policy, flavor="classic")
    held = []
    for i in range(num_ops):
        op = rng.choice(["insert", "insert", "match", "lock", "unlock", "evict"])
        ns = rng.choice([None, None, "lora-a"])
        toks = [rng.randrange(3) for _ in range(rng.randrange(20))]
        where = f"seed {seed}, page {page}, {policy}, op {i} ({op})"
        if op == "insert":
            prio = rng.randrange(3)
            aligned = toks[: len(toks) // page * page]  # SGLang's callers align
            a = sg.insert(base.InsertParams(key=radix.RadixKey(array("q", aligned), ns),
                                            priority=prio)).prefix_len
            b = ours.insert(RadixKey(toks, extra_key=ns), priority=prio).prefix_len
            assert a == b, f"{where}: prefix_len {a} != {b}"
        elif op in ("match", "lock"):
            ma = sg.match_prefix(base.MatchPrefixParams(key=radix.RadixKey(array("q", toks), ns)))
            mb = ours.match_prefix(RadixKey(toks, extra_key=ns))
            assert ma.device_prefix_len == mb.prefix_len, f"{where}: match differs"
            if op == "lock":
                sg.inc_lock_ref(ma.last_device_node)
                ours.inc_lock_ref(mb.last_node)
                held.append((ma.last_device_node, mb.last_node))
        elif op == "unlock" and held:
            node_a, node_b = held.pop(rng.randrange(len(held)))
            sg.dec_lock_ref(node_a)
            ours.dec_lock_ref(node_b)
        elif op == "evict":
            n = rng.randrange(12)
            a = sg.evict(base.EvictParams(num_tokens=n)).num_tokens_evicted
            b = ours.evict(n).num_evicted
            assert a == b, f"{where}: evicted {a} != {b}"
        assert (sg.evictable_size(), sg.protected_size()) == (
            ours.evictable_size(), ours.protected_size()), f"{where}: sizes differ"
        assert shape(sg.root_node) == shape(ours.root_node), f"{where}: trees differ"
    return num_ops


def main() -> int:
    args = wheel_args(wheel_parser(__doc__, "sglang", seeds=40),
                      "sglang/srt/mem_cache/radix_cache.py")
    mods = load_sglang(args.root)
    cases = itertools.product(POLICIES, (1, 2, 4, 16), range(args.seeds))
    ops, failures = run_seeds(lambda policy, page, seed: run(mods, seed, page, policy), cases)
    print(f"{ops:,} ops compared, {failures} mismatching runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
