"""Oracle: UnifiedRadixCache with FULL alone behaves as our RadixCache(flavor="unified") (which
tools/diff_sglang_unified.py checks against SGLang's own): the same random request lifecycles
(match, lock, allocate with eviction, checkpoint, finish with over-allocation, abort, evict)
give the same hits, trees (keys, slots, lock refs, hit counts, priorities), evictions, freed
slots in order, and sizes after every op."""

from __future__ import annotations

import random

import pytest

from radix.request import Req, SlotAllocator
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache
from radix.tree.unified_radix_cache import UnifiedRadixCache


def shape(node) -> tuple:
    kids = sorted((shape(c) for c in node.children.values()), key=repr)
    return (tuple(node.key.token_ids), node.key.extra_key, tuple(node.value), node.lock_ref,
            node.hit_count, node.priority, tuple(kids))


class Twin:
    """Both caches over their own allocators, fed the same ops."""

    def __init__(self, seed: int, page: int, policy: str) -> None:
        self.rng = rng = random.Random(seed)
        self.page = page
        size = rng.randrange(40, 120) if page == 1 else rng.randrange(8, 16) * page
        self.freed: tuple[list, list] = ([], [])
        self.allocs = [SlotAllocator(size, page_size=page) for _ in range(2)]
        for a, log in zip(self.allocs, self.freed):
            free = a.free
            a.free = lambda ids, free=free, log=log: (log.extend(ids), free(ids))[1]
        self.ref = RadixCache(page_size=page, eviction_policy=policy, allocator=self.allocs[0])
        self.new = UnifiedRadixCache(page_size=page, eviction_policy=policy,
                                     allocator=self.allocs[1])
        self.prefixes = [[rng.randrange(3) for _ in range(rng.randrange(30))] for _ in range(3)]
        self.running: list[tuple[Req, Req]] = []

    def admit(self) -> None:
        rng = self.rng
        toks = rng.choice(self.prefixes) + [rng.randrange(3) for _ in range(rng.randrange(1, 15))]
        kw = dict(max_new_tokens=3, priority=rng.randrange(3), extra_key=rng.choice([None, "x"]))
        pair = (Req("r", toks, **kw), Req("r", toks, **kw))
        hits = []
        for c, r in zip((self.ref, self.new), pair):
            m = c.match_prefix(RadixKey(r.all_ids[:-1], r.extra_key))
            r.prefix_indices, r.last_node, r.cache_protected_len = (
                list(m.slot_ids), m.last_node, m.prefix_len)
            hits.append(m.prefix_len)
        assert hits[0] == hits[1]
        self.ref.inc_lock_ref(pair[0].last_node)
        self.new.kv_of(pair[1]).receipt = self.new.inc_lock_ref(pair[1].last_node)
        n = len(toks) - hits[0]
        if self.allocs[0].available_size() + self.ref.evictable_size() < n + self.page:
            self.ref.dec_lock_ref(pair[0].last_node)
            self.new.dec_lock_ref(pair[1].last_node, self.new.req_states.pop(pair[1]).receipt)
            return
        for c, r, a in zip((self.ref, self.new), pair, self.allocs):
            if a.available_size() < n + self.page:
                c.evict(n + self.page - a.available_size())
            last = r.prefix_indices[-1] if r.prefix_indices else None
            r.slot_ids = list(r.prefix_indices) + a.alloc_extend(last, n)
            r.fill_ids = r.all_ids
            c.checkpoint(r, up_to=len(toks))
        self.running.append(pair)

    def finish(self, checkpoint: bool) -> None:
        if not self.running:
            return
        pair = self.running.pop(self.rng.randrange(len(self.running)))
        extra = self.rng.randrange(3)
        for c, r, a in zip((self.ref, self.new), pair, self.allocs):
            if checkpoint and a.available_size() >= extra + self.page:
                r.slot_ids += a.alloc_extend(r.slot_ids[-1], extra)
                r.output_ids += [1] * extra
            c.release_kv_cache(r, checkpoint=checkpoint)

    def step(self) -> None:
        op = self.rng.choice(["admit"] * 3 + ["finish"] * 2 + ["evict", "abort"])
        if op == "admit" and len(self.running) < 5:
            self.admit()
        elif op in ("finish", "abort"):
            self.finish(op == "finish")
        elif op == "evict":
            n = self.rng.randrange(1, 20)
            got, want = self.new.evict(n), self.ref.evict(n)
            assert got.num_tokens_evicted == want.num_evicted
        assert shape(self.new.root_node) == shape(self.ref.root_node)
        assert self.freed[1] == self.freed[0]
        assert (self.new.evictable_size(), self.new.protected_size()) == (
            self.ref.evictable_size(), self.ref.protected_size())
        self.new.check_invariants()
        for log in self.freed:
            log.clear()


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo", "tlru"])
@pytest.mark.parametrize("page", [1, 4])
def test_full_only_unified_tree_is_our_radix_cache(policy, page):
    for seed in range(3):
        twin = Twin(seed, page, policy)
        for _ in range(100):
            twin.step()
