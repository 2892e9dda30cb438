"""The walk every tree here runs (radix/tree/walk.py), against a brute-force reference, and the
host tier walking, splitting and checking through it (one tree: radix/hosttier/ on radix/tree/).

The reference for `EdgeMatcher.shared_len` is the common prefix of the edge and the key's rest,
counted one token at a time and floored to whole pages; every compare path is drawn: plain
lists, compact keys and edges (TokenRuns), and long first edges (>= GUARD_MIN_LEN tokens at
position 0), which the PrefixProbe compares in place.
"""

from __future__ import annotations

import random

import pytest

from radix.hosttier import HostNode, HostTierCache
from radix.request import SlotAllocator
from radix.tokens import TokenRuns
from radix.tree.invariants import InvariantError
from radix.tree.key import RadixKey
from radix.tree.node import TreeNode
from radix.tree.walk import GUARD_MIN_LEN, EdgeMatcher


def _reference(edge: list[int], rest: list[int], page: int) -> int:
    m = 0
    while m < min(len(edge), len(rest)) and edge[m] == rest[m]:
        m += 1
    return m if m == len(edge) else m - m % page


def _case(rng: random.Random, page: int) -> tuple[list[int], list[int], int, int]:
    """(edge, key, pos, n): an edge that starts like the key at pos (as a found child does),
    the key then agreeing for a while, maybe to the end, maybe past the edge."""
    edge_len = page * rng.choice([1, 2, 5, GUARD_MIN_LEN // page + 3])
    pos = 0 if rng.random() < 0.5 else page * rng.randrange(1, 4)
    edge = [rng.randrange(4) for _ in range(edge_len)]
    agree = rng.randrange(page, edge_len + page + 1)
    key = [9] * pos + edge[:agree] + [rng.randrange(4) for _ in range(rng.randrange(0, 8))]
    n = len(key) - len(key) % page
    return edge, key, pos, n


@pytest.mark.parametrize("page", [1, 2, 4])
def test_shared_len_is_the_common_prefix_in_whole_pages(page):
    """Per page size, 400 random edges and keys (half at position 0, a quarter of those long
    first edges), each compared as lists, as compact sequences, and again after the probe is
    built: shared_len equals the reference, and is len(edge) exactly when the whole edge is
    in the key."""
    rng = random.Random(page)
    matcher = EdgeMatcher(page)
    for _ in range(400):
        edge, key, pos, n = _case(rng, page)
        want = _reference(edge, key[pos:n], page)
        for compact in (False, True):
            as_seq = TokenRuns.from_ids if compact else list
            child = TreeNode(1, RadixKey(as_seq(edge)), list(range(len(edge))), 0.0)
            for _ in range(2):  # the second compare of a long first edge reuses its probe
                assert matcher.shared_len(as_seq(key), pos, n, child) == want, (edge, key, pos)


def test_host_tier_walks_a_long_first_edge_in_place_and_splits_it():
    """A 100-token first edge (past GUARD_MIN_LEN: the tree's PrefixProbe compares it, the probe
    kept on the node) and then a key agreeing on 70: the host tier's match splits the edge
    70 + 30, as RadixCache's would; the upper half is a HostNode holding the first 70 device
    slots, and the lower half's probe is dropped with its old edge."""
    cache = HostTierCache(SlotAllocator(256), host_tokens=512)
    prompt, slots = list(range(1000, 1100)), cache.allocator.alloc(100)
    cache.insert(prompt, slots)
    edge = cache.root_node.children[1000]
    assert cache.match_prefix(prompt + [7]).device_prefix_len == 100
    assert edge.guarded_key is not None
    match = cache.match_prefix(prompt[:70] + [1, 2, 3])
    upper = match.last_device_node
    assert match.device_prefix_len == 70 and type(upper) is HostNode and isinstance(upper, TreeNode)
    assert list(upper.children.values()) == [edge] and len(edge.key) == 30
    assert edge.guarded_key is None
    assert upper.value == match.slot_ids == slots[:70]
    cache.check_invariants()


def test_host_tier_check_runs_the_tree_edge_rules():
    """The host tier's check_invariants runs radix/tree's edge_problem: a child that does not
    point back to the node it is filed under (which the host tier's own rules, read from the
    child's side, do not see before) is named from its parent's side."""
    cache = HostTierCache(SlotAllocator(16), host_tokens=16)
    cache.insert([1, 2, 3], cache.allocator.alloc(3))
    cache.insert([1, 2, 4], cache.allocator.alloc(3))  # splits: [1 2] (node 2) -> [3], [4]
    cache.check_invariants()
    upper = cache.root_node.children[1]
    upper.children[4].parent = upper.children[3]  # leaf [4] points at its sibling
    with pytest.raises(InvariantError, match="node 2: child 3 does not point back"):
        cache.check_invariants()
