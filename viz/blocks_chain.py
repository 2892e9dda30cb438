"""A request's hash chain in a block-pool snapshot, where its lookup stopped, and the free queue.

Follows vLLM v1: block i of a request is hashed over (block i-1's hash, its 16 tokens, extra
keys); a lookup walks the chain from block 0 and stops at the first hash not cached, or before
the block holding the prompt's last token (that token is always recomputed). Reads snapshots and
`LookupRecord`s (radix/block_manager.py); hashing a request's tokens touches no pool.
Leaves out: which of several blocks with one hash a lookup takes (the lowest id is shown).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from radix.blocks.hashing import hash_request_tokens, hash_to_int64

REASONS = {  # LookupRecord.reason -> why the walk stopped there
    "miss": "miss: its hash is not cached (its tokens differ from every cached chain)",
    "cap": "cap: the block holding the prompt's last token is always recomputed",
    "partial": "partial: the block is not full, so it has no hash",
    "disabled": "prefix caching is off",
}


class ChainLink(NamedTuple):
    index: int  # block index in the request: tokens index*16 .. index*16+15
    hash: int  # low 64 bits of the block's chained hash
    block_id: int | None  # the block cached under that hash now; None when not cached
    state: str | None  # that block's state (BlockState.state); None when not cached


def request_chain(snap: Any, token_ids: Sequence[int], extra_key: str | None = None,
                  cache_salt: str | None = None) -> list[ChainLink]:
    """One link per full block of `token_ids`, matched against the snapshot's hashes.

    >>> from radix.blocks.pool import BlockPool; from radix.blocks.snapshot import take_snapshot
    >>> [link.block_id for link in request_chain(take_snapshot(BlockPool(3, 4), {}, 0), range(9))]
    [None, None]
    """
    by_hash: dict[int, Any] = {}
    for b in snap.blocks:  # by id: the lowest id wins a duplicate hash
        if b.hash is not None:
            by_hash.setdefault(b.hash, b)
    hashes = hash_request_tokens(list(token_ids), snap.block_size, extra_key, cache_salt)
    links = []
    for i, h in enumerate(hashes):
        low = hash_to_int64(h)
        b = by_hash.get(low)
        links.append(ChainLink(i, low, None if b is None else b.id, None if b is None else b.state))
    return links


def lookup_line(record: Any, block_size: int, tree_hit: int | None = None) -> str:
    """Where a lookup stopped and why; with the tree's match, the shared tokens re-prefilled.

    R2 of the walk: 128 blocks x 16 = 2,048 hit; block 128 (tokens 2,048..2,063) mixes 7 shared
    tokens (2,048..2,054) with R2's own, so it misses; the tree matched 2,055 = 2,048 + 7.
    """
    start = record.stop_block * block_size
    line = (f"{record.rid}: lookup hit {record.hit_blocks:,} blocks ({record.hit_tokens:,} "
            f"tokens) of {record.num_tokens:,}; stopped at block {record.stop_block:,} "
            f"(tokens {start:,}..{start + block_size - 1:,}): {REASONS[record.reason]}.")
    if tree_hit is not None and tree_hit > record.hit_tokens:
        line += (f" The tree matched {tree_hit:,}: {tree_hit - record.hit_tokens:,} shared "
                 f"tokens re-prefilled.")
    return line


def free_queue(snap: Any) -> list[Any]:
    """Blocks in the free queue, head first (the head is taken, and its hash evicted, next)."""
    return sorted((b for b in snap.blocks if b.free_pos is not None), key=lambda b: b.free_pos)


def queue_runs(queue: Sequence[Any]) -> list[tuple[int, int, str, int]]:
    """Runs of consecutive ids (ascending or descending) in one state: (first, last, state, n).

    A request's blocks come back last block first, so a freed chain 1..134 reads 134..1.
    """
    runs: list[list] = []
    for b in queue:
        if runs:
            first, last, state, n = runs[-1]
            d = b.id - last
            if state == b.state and abs(d) == 1 and (n == 1 or d == (1 if last > first else -1)):
                runs[-1] = [first, b.id, state, n + 1]
                continue
        runs.append([b.id, b.id, b.state, 1])
    return [tuple(r) for r in runs]


def queue_line(snap: Any, max_runs: int = 6) -> str:
    """The free queue as runs, head (next evicted) first.

    >>> from radix.blocks.pool import BlockPool; from radix.blocks.snapshot import take_snapshot
    >>> queue_line(take_snapshot(BlockPool(5), {}, 0))
    'free queue, head first (taken next): #1..#4 free (4)'
    """
    runs = queue_runs(free_queue(snap))
    if not runs:
        return "free queue: empty (every block is in use)"
    parts = [(f"#{a:,}" if a == b else f"#{a:,}..#{b:,}") + f" {s.replace('_', ', ')} ({n:,})"
             for a, b, s, n in runs[:max_runs]]
    more = f", … {len(runs) - max_runs:,} more runs" if len(runs) > max_runs else ""
    return "free queue, head first (taken next): " + ", ".join(parts) + more
