"""The walk every tree here runs (radix/tree/walk.py), against a brute-force reference (the
host tier runs it too: tests/radix/hosttier/test_hosttier_tree.py).

The reference for `EdgeMatcher.shared_len` is the common prefix of the edge and the key's rest,
counted one token at a time and floored to whole pages; every compare path is drawn: plain
lists, compact keys and edges (TokenRuns), and long first edges (>= GUARD_MIN_LEN tokens at
position 0), which the PrefixProbe compares in place.
"""

from __future__ import annotations

import random

import pytest

from radix.tokens import TokenRuns
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
