"""A big radix tree, then one split per step: the workload of the tree view's speed checks.

`split_workload` inserts random keys that share prefixes until the tree has `num_nodes` nodes,
then makes `num_steps` more snapshots, each after one insert that leaves an existing edge midway
(the edge's node splits in two and a new leaf grows): two nodes more per step. The browser tests
and benchmarks/tree_draw.py draw these snapshots. Leaves out: locks and evictions.
"""

from __future__ import annotations

import random
from typing import Any

from radix.tree.radix_cache import RadixCache


def split_workload(num_nodes: int = 1_000, num_steps: int = 10, seed: int = 0) -> list:
    """Snapshots: a tree of >= `num_nodes` nodes, then `num_steps` more, each after one insert
    that leaves an existing edge midway (the edge's node splits in two and a new leaf grows):
    two nodes more per step."""
    rng = random.Random(seed)
    cache = RadixCache()
    seqs: list[list[int]] = []
    while len(cache.snapshot().nodes) < num_nodes:
        if seqs and rng.random() < 0.9:
            base = rng.choice(seqs)
            cut = rng.randrange(1, len(base))
            seq = base[:cut] + [rng.randrange(1000, 2000) for _ in range(rng.randrange(1, 30))]
        else:
            seq = [rng.randrange(1000) for _ in range(rng.randrange(5, 60))]
        cache.insert(seq)
        seqs.append(seq)
    snaps = [cache.snapshot()]
    fresh = 10_000
    for _ in range(num_steps):
        node = rng.choice([n for n in snaps[-1].nodes if len(n.token_ids) >= 2])
        path = _path_tokens(snaps[-1], node.id)
        cut = len(path) - len(node.token_ids) + len(node.token_ids) // 2
        cache.insert(path[:cut] + [fresh])
        fresh += 1
        snaps.append(cache.snapshot())
    return snaps


def _path_tokens(snap: Any, node_id: int) -> list[int]:
    by_id = snap.by_id()
    out: list[int] = []
    node = by_id[node_id]
    while node.parent is not None:
        out[:0] = node.token_ids
        node = by_id[node.parent]
    return out
