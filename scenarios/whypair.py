"""The why panels' pictures, as data: a tree and a block pool that ran prompt A, then prompt B.

`pair_tree` inserts A then B into SGLang's RadixCache and names each node: on both paths, A's
own, B's own, and the node at whose end B leaves A's path (the end of their shared prefix, or
the root). `pair_blocks` runs A through vLLM's prefix cache (BlockCacheManager: look up,
allocate, free), then looks B up and allocates it: the pool's snapshot, B's block table, and
B's block to mark (the first whose hash A does not share, or where the lookup stopped).
Leaves out: drawing (viz/why.py); eviction (the tree is unbounded and the pool holds the pair).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache
from radix.why.diff import first_diff
from radix.why.prompt import Prompt


class PairTree(NamedTuple):
    snapshot: Any  # TreeSnapshot of a tree that inserted A, then B
    highlight: dict[int, str]  # node id -> role (viz/roles.py ROLES): both, A's, B's
    names: dict[int, str]  # node id -> label line ("shared: 20 tokens", "A only", "B only")
    parting_node: int  # the node at whose end B leaves A's path (the root when they share none)
    parting_label: str  # "B leaves A here: token 20" (B's first token that differs from A's)


def _parting_label(a: Prompt, b: Prompt, k: int) -> str:
    if a.namespace != b.namespace:
        return "B leaves A here: token 0 (another namespace)"
    if k == len(a.token_ids) == len(b.token_ids):
        return f"B ends here: all {k:,} tokens are A's"
    if k == len(b.token_ids):
        return f"B ends here, on A's path: token {k:,}"
    return f"B leaves A here: token {k:,}"


def pair_tree(a: Prompt, b: Prompt) -> PairTree:
    """A tree that cached A, then B: the shared prefix node (if any) and each one's own tail.

    A = 1 2 3, B = 1 2 9: the root's child holds [1 2] (shared), its children [3] (A's) and
    [9] (B's); B leaves A at the end of [1 2], at token 2.
    >>> t = pair_tree(Prompt("a", (1, 2, 3)), Prompt("b", (1, 2, 9)))
    >>> sorted(t.names.values()), t.parting_label
    (['A only', 'B only', 'shared: 2 tokens'], 'B leaves A here: token 2')
    """
    tree = RadixCache()
    tree.insert(RadixKey(list(a.token_ids), *a.namespace))
    tree.insert(RadixKey(list(b.token_ids), *b.namespace))
    snap = tree.snapshot()
    k = first_diff(a.token_ids, b.token_ids).common if a.namespace == b.namespace else 0
    hl, names = {}, {}
    parting = next(n.id for n in snap.nodes if n.parent is None)
    for n in snap.nodes:
        if n.parent is None:
            continue
        if n.parent == parting and k and len(n.token_ids) <= k:
            hl[n.id], names[n.id] = "matched", f"shared: {len(n.token_ids):,} tokens"
            shared = n.id
        elif n.token_ids[:1] == tuple(a.token_ids[k:k + 1]) and (
                n.extra_key, n.cache_salt) == a.namespace:
            hl[n.id], names[n.id] = "selected", "A only"
        else:
            hl[n.id], names[n.id] = "new", "B only"
    if k:
        parting = shared
    return PairTree(snap, hl, names, parting, _parting_label(a, b, k))


class PairBlocks(NamedTuple):
    snapshot: Any  # BlockPoolSnapshot after A ran and was freed, and B was allocated
    a_block_ids: list[int]  # A's block table, in token order (free now, their hashes cached)
    b_block_ids: list[int]  # B's block table, in token order (in use)
    labels: dict[int, str]  # block id -> what it holds ("B's block 0 = A's block 0")
    mark_index: int | None  # B's block to mark: the first whose hash differs, else where
    #                          vLLM's lookup stopped; None when B has no block there
    mark_block_id: int | None  # that block's id in the pool
    mark_label: str  # what the mark says ("B's block 2 (#5): the first whose hash differs")


STOPS = {"cap": "vLLM's lookup stops here: the block holding B's last token is computed again",
         "partial": "vLLM's lookup stops here: not a full block, so no hash"}


def pair_blocks(a: Prompt, b: Prompt, block_size: int, first_bad: int | None) -> PairBlocks:
    """A's blocks, then B's, in one pool; `first_bad` is B's first block whose hash A does not
    share (scenarios/why.py computes it from the hashes), None when every full block matches.

    A = tokens 0..59, B = 0..39 then 900..919, blocks of 16: A takes blocks #1..#4 and frees
    them (#4, partial, has no hash: vLLM puts it at the queue's head); B hits #1, #2 (tokens
    0..31) and takes #4, #5: B's block 2 (#4, tokens 32..47, holding token 40) is the first
    whose hash differs.
    """
    num = -(-len(a.token_ids) // block_size) + -(-len(b.token_ids) // block_size)
    manager = BlockCacheManager(BlockPool(num + 2, block_size))
    ids = []
    for rid, p in (("A", a), ("B", b)):
        req = Req(rid, list(p.token_ids), extra_key=p.extra_key, cache_salt=p.cache_salt)
        hit = manager.get_computed_blocks(req)
        manager.allocate_slots(req, len(p.token_ids) - hit.num_computed_tokens, hit)
        ids.append(manager.get_block_ids(rid)[0])
        if rid == "A":
            manager.free(req)
    ids_a, ids_b = ids
    stop = manager.lookups[-1]
    labels = {x: f"A's block {i}" for i, x in enumerate(ids_a)}
    for i, x in enumerate(ids_b):  # B's first stop.hit_blocks blocks are A's, hit
        labels[x] = f"B's block {i}" + (f" = A's block {i} (a hit)" if i < stop.hit_blocks
                                        else "")
    index = first_bad if first_bad is not None else stop.stop_block
    if index >= len(ids_b):
        return PairBlocks(manager.snapshot(), ids_a, ids_b, labels, None, None, "")
    what = ("the first whose hash differs" if first_bad is not None else
            STOPS.get(stop.reason, "vLLM's lookup stops here"))
    return PairBlocks(manager.snapshot(), ids_a, ids_b, labels, index, ids_b[index],
                      f"B's block {index} (#{ids_b[index]}): {what}")
