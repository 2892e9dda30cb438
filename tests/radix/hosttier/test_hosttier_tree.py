"""The host tier on radix/tree's own code (one tree): HostNode is a TreeNode, its match runs the
tree's walk (the PrefixProbe on a long first edge, split_edge where the match ends), and its
check_invariants runs the tree's edge rules."""

from __future__ import annotations

import pytest

from radix.hosttier import HostNode, HostTierCache
from radix.request import SlotAllocator
from radix.tree.invariants import InvariantError
from radix.tree.node import TreeNode


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
