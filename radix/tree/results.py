"""What the tree's calls return: MatchResult (match_prefix), InsertResult, EvictResult.

Follows SGLang 0.5.23's MatchResult (mem_cache/base_prefix_cache.py) and its insert and evict
results, with the slots of a match joined only when read (`concat_values`, which the host
tier's match runs too). Leaves out: SGLang's host and mamba fields of a MatchResult (the host
tier has its own, radix/hosttier/node.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radix.tree.node import TreeNode


class MatchResult:
    """What match_prefix found: `slot_ids` (KV slots of the matched prefix, in token order),
    `last_node` (the deepest node of the match; the root when nothing matched) and `prefix_len`
    (tokens matched: len(slot_ids)).

    subtle: the slots are joined when `slot_ids` is read, a fresh sequence each read and never
    kept (SGLang 0.5.23's match does not build them either; its callers call
    path_device_indices, which builds them per call), from the path's values as they were at
    match time: a later split or eviction does not change them. A caller that needs them twice
    keeps the first; a result held on to holds no joined copy (dropping it costs nothing).

    >>> r = MatchResult([[4, 5], [6]], None, 3); r.slot_ids, r.prefix_len
    ([4, 5, 6], 3)
    >>> r.slot_ids is r.slot_ids  # joined anew on each read
    False
    """

    __slots__ = ("_values", "last_node", "prefix_len")

    def __init__(self, values: list[Sequence[int]], last_node: TreeNode, prefix_len: int) -> None:
        self._values = values  # the matched nodes' value lists, root side first
        self.last_node = last_node
        self.prefix_len = prefix_len

    @property
    def slot_ids(self) -> Sequence[int]:
        return concat_values(self._values)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, MatchResult) and self.prefix_len == other.prefix_len
                and self.last_node is other.last_node and self.slot_ids == other.slot_ids)

    __hash__ = None

    def __repr__(self) -> str:
        return f"MatchResult(prefix_len={self.prefix_len}, last_node={self.last_node!r})"


def concat_values(values: list[Sequence[int]]) -> Sequence[int]:
    """The slot ids of a path, in token order: a new list, or one compact sequence when the
    values are compact sequences with a `concat` class method.

    >>> concat_values([[1, 2], [3]]), concat_values([])
    ([1, 2, 3], [])
    """
    if not values:
        return []
    first = values[0]
    if type(first) is not list and hasattr(first, "concat"):
        return type(first).concat(values)
    if len(values) == 1:
        return list(first)
    out: list[int] = []
    for v in values:
        out += v
    return out


class InsertResult(NamedTuple):
    prefix_len: int  # tokens of the key that were already cached (their slots are duplicates)
    last_node: TreeNode  # the node the key ends in


class EvictResult(NamedTuple):
    num_evicted: int  # tokens freed (may overshoot the request: whole nodes go)
    evicted_nodes: list[TreeNode]  # in the order the policy popped them
