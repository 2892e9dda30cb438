"""Property tests: random op sequences on RadixCache against brute-force references.

The reference for content is the prefix-closed set P of cached (namespace, token prefix) pairs:
insert adds every page-aligned prefix of the key, a match is the longest page-aligned prefix of
the key in P, and with value=None the slots returned must be the matched token ids themselves.
The reference for eviction rescans the whole tree before every pop (SGLang's own approach) and
must pop the same nodes in the same order. check_invariants runs after every op.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from radix.runs.ops import OpRunner
from radix.traces.ops import Op, OpTrace
from radix.tree import walk
from radix.tree.evict_policy import POLICIES
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

NAMESPACES = (None, "lora-a")
tokens = st.lists(st.integers(0, 3), min_size=0, max_size=24)
raw_op = st.one_of(
    st.tuples(st.just("insert"), tokens, st.sampled_from(NAMESPACES), st.integers(0, 2),
              st.booleans()),
    st.tuples(st.just("match"), tokens, st.sampled_from(NAMESPACES)),
    st.tuples(st.just("lock"), st.integers(0, 50)),
    st.tuples(st.just("unlock"), st.integers(0, 50)),
    st.tuples(st.just("evict"), st.integers(0, 30)),
)


def path_of(node) -> tuple[int, ...]:
    parts = []
    while node.parent is not None:
        parts.append(tuple(node.key.token_ids))
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)


def reference_evict(cache: RadixCache, num_tokens: int) -> list[int]:
    """Pop the minimum (sort key, id) evictable leaf, rescanning every node each time."""
    evicted, freed = [], 0
    while freed < num_tokens:
        nodes = [n for n in cache._nodes.values() if n is not cache.root_node]
        leaves = [n for n in nodes if n.lock_ref == 0 and not n.children]
        if not leaves:
            break
        x = min(leaves, key=lambda n: (cache.sort_key(n), n.id))
        del x.parent.children[x.key.child_key(cache.page_size)]
        del cache._nodes[x.id]
        freed += len(x.key)
        evicted.append(x.id)
    return evicted


def longest_cached(prefixes: set, ns, key: list[int], page: int) -> int:
    best = 0
    for length in range(page, len(key) + 1, page):
        if (ns, tuple(key[:length])) in prefixes:
            best = length
        else:
            break
    return best


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(raw_op, max_size=40), page=st.sampled_from([1, 2, 4, 16]),
       policy=st.sampled_from(POLICIES), guard=st.sampled_from([1, walk.GUARD_MIN_LEN]))
def test_raw_ops_match_brute_force(ops, page, policy, guard):
    """guard=1 sends every first edge through the PrefixProbe (keys here are short)."""
    saved, walk.GUARD_MIN_LEN = walk.GUARD_MIN_LEN, guard
    try:
        _raw_ops_match_brute_force(ops, page, policy)
    finally:
        walk.GUARD_MIN_LEN = saved


def _raw_ops_match_brute_force(ops, page, policy):
    cache = RadixCache(page_size=page, eviction_policy=policy)
    cached: set = set()  # (namespace, token prefix) of every cached page-aligned prefix
    held: list = []
    for op in ops:
        kind = op[0]
        if kind in ("insert", "match"):
            ns = op[2]
            key = RadixKey(op[1], extra_key=ns)
            expect = longest_cached(cached, key.namespace, op[1], page)
            if kind == "insert":
                r = cache.insert(key, priority=op[3], chunked=op[4])
                assert r.prefix_len == expect
                aligned = len(op[1]) // page * page
                for length in range(page, aligned + 1, page):
                    cached.add((key.namespace, tuple(op[1][:length])))
            else:
                r = cache.match_prefix(key)
                assert r.prefix_len == expect
                assert r.slot_ids == op[1][:expect]  # values are the token ids
                if r.last_node is not cache.root_node:
                    assert path_of(r.last_node) == tuple(op[1][:expect])
        elif kind == "lock":
            live = sorted(cache._nodes)
            node = cache.node(live[op[1] % len(live)])
            cache.inc_lock_ref(node)
            held.append(node)
        elif kind == "unlock" and held:
            cache.dec_lock_ref(held.pop(op[1] % len(held)))
        elif kind == "evict":
            expected = reference_evict(copy.deepcopy(cache), op[1])
            result = cache.evict(op[1])
            assert [n.id for n in result.evicted_nodes] == expected
            for n in result.evicted_nodes:
                full = path_of(n)
                start = len(full) - len(n.key)
                ns = n.key.namespace
                for length in range(start + page, len(full) + 1, page):
                    cached.discard((ns, full[:length]))
        cache.check_invariants()
    # the tree holds exactly the reference's prefixes
    in_tree = set()
    for n in cache._nodes.values():
        if n is cache.root_node:
            continue
        full, start = path_of(n), len(path_of(n)) - len(n.key)
        for length in range(start + page, len(full) + 1, page):
            in_tree.add((n.key.namespace, full[:length]))
    assert in_tree == cached


request_op = st.one_of(
    st.tuples(st.just("start"), st.lists(st.integers(0, 2), min_size=1, max_size=20)),
    st.tuples(st.just("extend"), st.integers(0, 9), st.integers(1, 8)),
    st.tuples(st.just("decode"), st.integers(0, 9), st.integers(0, 2)),
    st.tuples(st.just("unfinished"), st.integers(0, 9)),
    st.tuples(st.just("finished"), st.integers(0, 9)),
    st.tuples(st.just("evict"), st.integers(0, 20)),
)


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(request_op, max_size=50), page=st.sampled_from([1, 2, 4, 16]),
       policy=st.sampled_from(POLICIES))
def test_request_ops_keep_slots_and_locks_consistent(ops, page, policy):
    """Every slot is exactly one of: free, in the tree, or owned by a running request."""
    trace = OpTrace(page_size=page, policy=policy, capacity=64)
    runner = OpRunner(trace)
    cache, alloc = runner.cache, runner.allocator
    n = finished = 0
    for i, op in enumerate(ops):
        rids = sorted(runner.reqs)
        try:
            if op[0] == "start":
                runner.run(Op(i, "start", {"rid": f"r{n}", "tokens": op[1]}))
                n += 1
            elif op[0] == "evict":
                runner.run(Op(i, "evict", {"num_tokens": op[1]}))
            elif rids:
                rid = rids[op[1] % len(rids)]
                req = runner.reqs[rid]
                left = max(0, len(req.origin_input_ids) - len(req.slot_ids))
                if op[0] == "extend":
                    runner.run(Op(i, "extend", {"rid": rid, "num_tokens": min(op[2], left)}))
                elif op[0] == "unfinished":
                    runner.run(Op(i, "unfinished", {"rid": rid}))
                else:  # decode / finished: finish the prefill first, as a scheduler would
                    if left:
                        runner.run(Op(i, "extend", {"rid": rid}))
                    if op[0] == "decode" or not req.output_ids:
                        runner.run(Op(i, "decode", {"rid": rid, "token": op[-1] % 3}))
                    if op[0] == "finished":
                        runner.run(Op(i, "finished", {"rid": rid}))
                        finished += 1
        except ValueError as exc:
            assert "out of KV slots" in str(exc)
        cache.check_invariants()
        alloc.check_invariants()
        tree_slots = [s for node in cache._nodes.values() for s in node.value]
        own = [s for r in runner.reqs.values() for s in r.slot_ids[r.cache_protected_len:]]
        assert len(set(tree_slots)) == len(tree_slots)
        assert not set(tree_slots) & set(own)
        assert set(tree_slots) | set(own) == alloc._ids.in_use
