"""What one KV-cache group of vLLM 0.33's hybrid block cache is (v1/kv_cache_interface.py), and
the block-size arithmetic its engine core does before the coordinator starts (kv_cache_utils.py).

A hybrid model's layers are split into groups of one kind each: full attention, sliding window,
or Mamba (GDN linear attention and Mamba-2 both count as Mamba: one state per request). Each
group has its own block size and its own block table per request; all groups draw blocks from
one pool. Here: the three specs (as frozen dataclasses, compared by value as vLLM compares them),
the Mamba checkpoint helpers, the hashes of a coarser block (`hashes_at`), and
`resolve_block_sizes` (the scheduler block and the hash block). Leaves out: MLA, chunked-local,
cross-attention, DCP/PCP sharding, EAGLE drops, lookahead hashes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAMBA_CACHE_MODES = ("align", "none")  # vLLM 0.33's MambaCacheMode


@dataclass(frozen=True)
class FullAttentionSpec:
    block_size: int  # tokens per block
    page_size_bytes: int = 0  # one block of one layer (for the picture; no rule reads it)

    kind = "full_attention"  # vLLM's KVCacheSpecKind value, as KV events carry it
    sliding_window = None


@dataclass(frozen=True)
class SlidingWindowSpec:
    block_size: int
    sliding_window: int  # tokens a query attends to, itself included
    page_size_bytes: int = 0

    kind = "sliding_window"

    def __post_init__(self) -> None:
        if self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1, got {self.sliding_window}")


@dataclass(frozen=True)
class MambaSpec:
    block_size: int  # tokens per state block (the attention block in "align" mode)
    mamba_cache_mode: str = "align"  # "align": states at block boundaries; "none": no caching
    num_prefill_checkpoint_blocks: int = 0  # 1 when the prefill kernel exports mid-chunk states
    prefill_checkpoint_alignment: int | None = None  # their token grid (None: cannot export)
    page_size_bytes: int = 0

    kind = "mamba"
    sliding_window = None

    def __post_init__(self) -> None:
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise ValueError(f"mamba_cache_mode must be one of {MAMBA_CACHE_MODES}, "
                             f"got {self.mamba_cache_mode!r}")


KVCacheSpec = FullAttentionSpec | SlidingWindowSpec | MambaSpec


@dataclass(frozen=True)
class KVCacheGroupSpec:
    layer_names: tuple[str, ...]  # the model layers sharing this group's block tables
    kv_cache_spec: KVCacheSpec


def get_mamba_prefill_checkpoint_position(num_tokens: int, hash_block_size: int) -> int:
    """Where a prefill of `num_tokens` keeps its reusable Mamba state: the last hash-block
    boundary strictly before its last token (that token is recomputed for logits).

    >>> [get_mamba_prefill_checkpoint_position(n, 576) for n in (2200, 1153, 576)]
    [1728, 1152, 0]
    """
    return max((num_tokens - 1) // hash_block_size * hash_block_size, 0)


def is_mamba_prefill_checkpoint_valid(query_start: int, query_end: int, checkpoint_position: int,
                                      hash_block_size: int, mamba_block_size: int,
                                      checkpoint_alignment: int | None) -> bool:
    """Whether the prefill kernel can export the state at `checkpoint_position` from inside
    the chunk [query_start, query_end) (FlashInfer GDN, Mamba-2): a later column than the one
    the chunk starts from, on the alignment grid from the chunk's start.

    >>> is_mamba_prefill_checkpoint_valid(0, 2200, 1728, 576, 576, 576)
    True
    """
    if checkpoint_alignment is None:
        return False
    initial_state_col = (query_start - 1) // mamba_block_size
    checkpoint_col = -(-query_end // mamba_block_size) - 2
    return (query_start % hash_block_size == 0
            and checkpoint_col > initial_state_col
            and query_start + hash_block_size <= checkpoint_position
            and query_start < checkpoint_position < query_end
            and (checkpoint_position - query_start) % checkpoint_alignment == 0)


def hashes_at(block_hashes: Sequence[bytes], hash_block_size: int,
              block_size: int) -> Sequence[bytes]:
    """A request's hashes seen at `block_size` (a multiple of `hash_block_size`): a block's hash
    is the hash at its last hash-block boundary (each hash chains over the whole prefix).

    >>> hashes_at([b"A", b"B", b"C", b"D", b"E"], 16, 32)
    [b'B', b'D']
    """
    if block_size == hash_block_size:
        return block_hashes
    if block_size % hash_block_size:
        raise ValueError(f"block size {block_size} is not a multiple of the hash block "
                         f"{hash_block_size}")
    k = block_size // hash_block_size
    return block_hashes[k - 1::k]


def partial_hash_hits_enabled(specs: Sequence[KVCacheSpec], hash_block_size: int) -> bool:
    """Whether hits may end inside a block (vLLM's fine-grained `prefix_match_unit` hits): a
    Mamba "align" group with blocks larger than the hash block, and no other group that can
    only look up whole blocks (sliding window) unless its block is the hash block.

    >>> partial_hash_hits_enabled([FullAttentionSpec(576), MambaSpec(576)], 64)
    True
    >>> partial_hash_hits_enabled([FullAttentionSpec(576), MambaSpec(576)], 576)
    False
    """
    if not any(isinstance(s, MambaSpec) and s.mamba_cache_mode == "align"
               and s.block_size > hash_block_size for s in specs):
        return False
    return all(not isinstance(s, SlidingWindowSpec) or s.block_size == hash_block_size
               for s in specs)


def resolve_block_sizes(specs: Sequence[KVCacheSpec], enable_caching: bool = True,
                        prefix_match_unit: int | None = None) -> tuple[int, int]:
    """(scheduler_block_size, hash_block_size), as vLLM's resolve_kv_cache_block_sizes: the
    scheduler block is the LCM of the groups' blocks; hashes are taken every
    `prefix_match_unit` tokens, else at the GCD of the blocks (one group: its block).

    >>> resolve_block_sizes([FullAttentionSpec(576), MambaSpec(576)], prefix_match_unit=64)
    (576, 64)
    """
    sizes = [s.block_size for s in specs]
    if len(sizes) <= 1:
        bs = sizes[0] if sizes else 1
        if prefix_match_unit not in (None, bs) and sizes and enable_caching:
            raise ValueError(f"prefix_match_unit {prefix_match_unit}: with one KV cache group "
                             f"hits land on the block size ({bs}); unset it or set it to {bs}")
        return bs, bs
    scheduler = math.lcm(*sizes)
    if not enable_caching or any(isinstance(s, MambaSpec) and s.mamba_cache_mode != "align"
                                 for s in specs):
        return scheduler, scheduler
    hash_bs = prefix_match_unit if prefix_match_unit is not None else math.gcd(*sizes)
    if any(bs % hash_bs for bs in sizes):
        raise ValueError(f"prefix_match_unit {hash_bs} must divide every group's block size "
                         f"{sizes}")
    return scheduler, hash_bs
