"""The unified tree's parameters and results, with SGLang 0.5.23's names (base_prefix_cache.py:
InsertParams, InsertResult, MatchResult, EvictResult), over our MatchResult (slot_ids, last_node,
prefix_len: SGLang's device_prefix_len). Leaves out: host hit lengths, adopted ranges, the
rotation-base and session fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radix.tree.components.base import FULL, MAMBA, SWA
from radix.tree.key import RadixKey
from radix.tree.results import MatchResult


@dataclass
class InsertParams:
    """SGLang's InsertParams, the fields the components read."""

    key: RadixKey
    value: Sequence[int] | None = None  # FULL slots, one per token (None: the token ids)
    prev_prefix_len: int = 0  # the request already owns [0, here) through the tree
    inserted_len: int = 0  # the request inserted [0, here) before: no hit counted there
    priority: int = 0
    swa_evicted_seqlen: int = 0  # the request's SWA slots below here are freed
    mamba_value: list[int] | None = None  # the state slot to keep at the key's end
    mamba_keep_idx: int | None = None  # which ping-pong slot mamba_value came from
    swa_branching_seqlen: int | None = None


class InsertResult:
    """What insert did: `prefix_len` (already cached), `last_node`, `mamba_exist` (the node
    already had a state: the caller keeps, and frees, the one it offered)."""

    __slots__ = ("prefix_len", "last_node", "mamba_exist", "swa_branch_inserted")

    def __init__(self, prefix_len: int = 0, last_node: Any = None) -> None:
        self.prefix_len = prefix_len
        self.last_node = last_node
        self.mamba_exist = False
        self.swa_branch_inserted = False


class HybridMatchResult(MatchResult):
    """MatchResult (slot_ids, last_node, prefix_len: SGLang's device_prefix_len) and what the
    components add: `full_kv_hit_length` (FULL alone matched this far), the branching
    seqlens (where a request should keep a state / insert, so the next one can hit)."""

    __slots__ = ("full_kv_hit_length", "mamba_branching_seqlen", "swa_branching_seqlen")

    def __init__(self, values, last_node, prefix_len: int, full_kv_hit_length: int) -> None:
        super().__init__(values, last_node, prefix_len)
        self.full_kv_hit_length = full_kv_hit_length
        self.mamba_branching_seqlen: int | None = None
        self.swa_branching_seqlen: int | None = None

    def __repr__(self) -> str:
        return (f"HybridMatchResult(prefix_len={self.prefix_len}, full_kv_hit_length="
                f"{self.full_kv_hit_length}, mamba_branching_seqlen="
                f"{self.mamba_branching_seqlen})")


class EvictResult(dict):
    """Tokens (FULL, SWA) and states (MAMBA) evicted, by component; `.num_tokens_evicted`,
    `.swa_num_tokens_evicted`, `.mamba_num_evicted` as SGLang names them."""

    num_tokens_evicted = property(lambda self: self.get(FULL, 0))
    swa_num_tokens_evicted = property(lambda self: self.get(SWA, 0))
    mamba_num_evicted = property(lambda self: self.get(MAMBA, 0))
