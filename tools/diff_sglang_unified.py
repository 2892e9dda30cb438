"""Differential check of our RadixCache against SGLang 0.5.23's UnifiedRadixCache (not a test).

0.5.23 serves from UnifiedRadixCache over a TreeCore: the bundled Rust extension by default,
the Python `unified_tree_core.py` as the fallback. This drives both, each beside our cache, on
CPU (tools/sglang_unified.py stubs only GPU kernels, layers and collectives), through the
request lifecycles of tools/diff_sglang_requests.py, run by SGLang's own common.py
(match_kv_cache on prompt[:-1], lock, evict_from_tree_cache for the allocation shortfall,
chunked checkpoint_kv_cache, decode with check_decode_capacity and retraction,
release_kv_cache for finish and abort), pages 1 and 16, policies lru, lfu, slru, priority and
tlru. Compared after every op: slots freed (exact ids), tokens evicted, sizes, each running
request's row and lengths, and the whole tree: slot ids per node, lock refs, and (Python core,
whose nodes are Python objects) hit counts and priorities. The Rust core's tree is read from its
own pretty_print (node ids, key lengths, locks) and per-node device values.

    python tools/diff_sglang_unified.py /tmp/sgl/ex --seeds 40
    python tools/diff_sglang_unified.py /tmp/sgl/ex --flavor classic   # shows the differences
    python tools/diff_sglang_unified.py /tmp/sgl/ex --break-rule tlru_history   # must mismatch

--break-rule flips one rule in our model (split_time: a split keeps classic times; tlru_history:
T-LRU reads the resident depth instead of the high-water history; hit_count: every node on an
insert's path counts a hit) to show that the check catches it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import diff_sglang_requests as dsr  # noqa: E402
from sglang_unified import build, command_line  # noqa: E402
from wheels import run_seeds  # noqa: E402

from radix.request import SlotAllocator  # noqa: E402
from radix.tree.radix_cache import RadixCache  # noqa: E402

POLICIES = ("lru", "lfu", "slru", "priority", "tlru")
NODE_LINE = re.compile(r"^(\s*)\[(\d+)\]\s+(\d+)\s+full_lock=(-?\d+)")


class SGReq(dsr.SGReq):
    """The extra Req attributes UnifiedRadixCache.checkpoint_into_tree reads."""

    def __init__(self, r) -> None:
        super().__init__(r)
        self.session_id = self.kv_rotation_base = self.finished_reason = self.session = None


def rust_tree(tree) -> list:
    """The Rust core's nodes as (depth, node id, lock_ref), from its pretty_print (fd 1)."""
    sys.stdout.flush()
    with tempfile.TemporaryFile(mode="w+") as out:
        saved = os.dup(1)
        try:
            os.dup2(out.fileno(), 1)
            tree.tree_core.pretty_print()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        lines = out.read().splitlines()
    rows = []
    for line in lines:
        m = NODE_LINE.match(line)
        if m:
            rows.append((len(m.group(1)), int(m.group(2)), int(m.group(4))))
    return rows


def rust_shape(tree, full) -> tuple:
    """(slot ids, lock_ref, children) from the root, children sorted."""
    rows = rust_tree(tree)
    core = tree.tree_core

    def build_at(i: int) -> tuple[tuple, int]:
        depth, node_id, lock = rows[i]
        value = core.get_component_device_value(node_id, full)
        slots = () if value is None or i == 0 else tuple(value.tolist())
        kids, j = [], i + 1
        while j < len(rows) and rows[j][0] > depth:
            kid, j = build_at(j)
            kids.append(kid)
        return (slots, lock if i else None, tuple(sorted(kids, key=repr))), j

    return build_at(0)[0] if rows else ()


def py_shape(node, full, rich: bool, root: bool = True) -> tuple:
    """The Python core's nodes as rust_shape builds them (+ hit count, priority when rich)."""
    data = node.component_data[full]
    slots = () if root or data.value is None else tuple(data.value.tolist())
    kids = tuple(sorted((py_shape(c, full, rich, False) for c in node.children.values()),
                        key=repr))
    head = (slots, None if root else data.lock_ref)
    return head + ((node.hit_count, node.priority) if rich and not root else ()) + (kids,)


def our_shape(node, rich: bool, root: bool = True) -> tuple:
    slots = () if root else tuple(node.value)
    kids = tuple(sorted((our_shape(c, rich, False) for c in node.children.values()), key=repr))
    head = (slots, None if root else node.lock_ref)
    return head + ((node.hit_count, node.priority) if rich and not root else ()) + (kids,)


class Pair(dsr.Pair):
    """SGLang's UnifiedRadixCache (one TreeCore) and ours, fed the same requests."""

    def __init__(self, usg, core: str, flavor: str, seed: int, page: int, policy: str,
                 config: dict) -> None:
        sg = SimpleNamespace(
            radix=SimpleNamespace(RadixCache=lambda p: build(usg, p, core)),
            params=_Params(usg.params, policy, config), alloc_base=usg.alloc_base,
            common=usg.common)
        super().__init__(sg, seed, page, policy)
        self.usg, self.core = usg, core
        self.alloc = SlotAllocator(self.size, page_size=page)
        self._wrap_free(self.alloc, self.our_freed)
        self.ours = RadixCache(page_size=page, eviction_policy=policy, policy_config=config,
                               allocator=self.alloc, flavor=flavor)
        evict = self.ours.evict
        self.ours.evict = lambda n: self._log(self.our_evicted, evict(n))
        self.label = f"{core} core, page {page}, {policy}, seed {seed} ({self.size} slots)"

    def new_request(self):
        s, o = super().new_request()
        return SGReq(o), o

    def _wrap_sglang(self) -> None:
        tree, log = self.tree, self.sg_evicted
        evict = tree._evict

        def logged(params, *args, **kwargs):
            result = evict(params, *args, **kwargs)
            log.append(("evicted", result.num_tokens_evicted))
            return result

        tree._evict = logged

    @staticmethod
    def _log(log: list, result):
        log.append(("evicted", result.num_evicted))
        dsr.STATS["tel_safe_evictions"] = dsr.STATS.get("tel_safe_evictions", 0) + sum(
            1 for n in result.evicted_nodes
            if isinstance(n.heap_key, tuple) and n.heap_key[0] == -1)
        dsr.STATS["evictions"] += bool(result.num_evicted)
        return result

    def compare(self, where: str) -> None:
        t, o = self.tree, self.ours
        sg_shape = (rust_shape(t, self.usg.FULL) if self.core == "rust"
                    else py_shape(t.tree_core.root_node, self.usg.FULL, True))
        rich = self.core == "python"
        assert sg_shape == our_shape(o.root_node, rich), \
            f"{where}: trees differ\n  SGLang {sg_shape}\n  ours   {our_shape(o.root_node, rich)}"
        self.sg_evicted[:] = [e for e in self.sg_evicted if e[1]]
        self.our_evicted[:] = [e for e in self.our_evicted if e[1]]
        assert self.sg_freed == self.our_freed, \
            f"{where}: slots freed\n  SGLang {self.sg_freed}\n  ours   {self.our_freed}"
        assert self.sg_evicted == self.our_evicted, \
            f"{where}: evicted\n  SGLang {self.sg_evicted}\n  ours   {self.our_evicted}"
        for log in (self.sg_freed, self.our_freed, self.sg_evicted, self.our_evicted):
            log.clear()
        assert (t.evictable_size(), t.protected_size(), self.sg_alloc.available_size()) == (
            o.evictable_size(), o.protected_size(), self.alloc.available_size()), \
            f"{where}: sizes differ"
        for s, r in self.running + ([self.chunked] if self.chunked else []):
            assert s.row() == r.slot_ids, f"{where}: {r.rid}'s row differs"
            assert (s.kv.cache_protected_len, s.kv.cache_inserted_len) == (
                r.cache_protected_len, r.cache_inserted_len), f"{where}: {r.rid}'s lengths"
        o.check_invariants()


class _Params:
    """CacheInitParams with the run's eviction policy config (T-LRU's threshold)."""

    def __init__(self, module, policy: str, config: dict) -> None:
        self.module, self.config = module, config

    def CacheInitParams(self, **kwargs):  # noqa: N802  (the name Pair calls)
        return self.module.CacheInitParams(**kwargs, eviction_policy_config=self.config or None)


def policy_config(policy: str, page: int, rng: random.Random) -> dict:
    """T-LRU's threshold and next-prompt estimate, in tokens; nothing for the others."""
    if policy != "tlru":
        return {}
    return {"threshold": rng.randrange(0, 40) * (1 if page == 1 else page // 4),
            "next_prompt_estimate": rng.randrange(0, 20)}


def run(usg, core: str, flavor: str, seed: int, page: int, policy: str, num_ops: int) -> int:
    config = policy_config(policy, page, random.Random(seed * 7919 + page))
    p = Pair(usg, core, flavor, seed, page, policy, config)
    for i in range(num_ops):
        op = p.rng.choice(["admit"] * 4 + ["decode"] * 5 + ["abort"])
        where = f"{p.label}, op {i} ({op})"
        getattr(p, op)(where)
        p.compare(where)
    return p.num_reqs


def _break_split_time() -> None:
    from radix.tree import radix_cache
    radix_cache.split_times = lambda cache, new, child: None


def _break_tlru_history() -> None:
    from radix.tree import evict_policy
    make = evict_policy.make_tlru

    def broken(threshold=0, next_prompt_estimate=0):
        key = make(threshold, next_prompt_estimate)
        return lambda node: key(_Resident(node))

    evict_policy.make_tlru = broken


class _Resident:
    """A node whose T-LRU history is its resident depth (the rule SGLang deliberately avoids)."""

    def __init__(self, node) -> None:
        self.node = node

    def __getattr__(self, name):
        if name == "tlru_history_len":
            return self.node.tlru_cached_prefix_len
        return getattr(self.node, name)


def _break_hit_count() -> None:
    from radix.tree import radix_cache
    insert = radix_cache.RadixCache._insert
    radix_cache.RadixCache._insert = lambda self, key, value, priority, inserted_len: insert(
        self, key, value, priority, 0)


BREAKS = {"split_time": _break_split_time, "tlru_history": _break_tlru_history,
          "hit_count": _break_hit_count}


def main() -> int:
    def own(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--ops", type=int, default=60, help="lifecycle ops per run")
        ap.add_argument("--flavor", default="unified", choices=("unified", "classic"))

    args, usg = command_line(__doc__, 40, POLICIES, BREAKS, own)
    dsr.SGReq = SGReq
    failed = 0
    for core, policy, page in itertools.product(args.cores.split(","),
                                                args.policies.split(","),
                                                [int(x) for x in args.pages.split(",")]):
        reqs, fails = run_seeds(lambda seed, c=core, po=policy, pg=page: run(
            usg, c, args.flavor, seed, pg, po, args.ops), [(s,) for s in range(args.seeds)])
        failed += fails
        print(f"{core:6} core  page {page:2}  {policy:8}  {reqs:6,} requests  "
              f"{fails} mismatching runs of {args.seeds}", flush=True)
    print("exercised:", ", ".join(f"{k} {v:,}" for k, v in dsr.STATS.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
