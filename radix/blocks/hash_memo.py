"""Block hashes remembered by prefix, so that a prompt hashes only what no earlier prompt had.

vLLM hashes every full block of a request when it arrives (a chain: each hash covers the block
and everything before it). On a production trace most of a prompt is a prefix some earlier
prompt already had (a conversation's next turn repeats the last one): the same chain, the same
hashes. `HashMemo` keeps them on a prefix trie (trie.py, which never splits or forgets) by
namespace (LoRA, cache_salt: what enters the hash besides the tokens) and hashes only the
rest. Exact: a hash is reused only where the tokens and namespace from the start agree
(tests/radix/blocks/test_block_manager.py holds memo and no memo equal). Costs a trie node per
distinct branch and a reference per distinct block. Follows nothing upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from radix.blocks.trie import PrefixTrie


class HashMemo:
    """`hashes(tokens, namespace, compute)`: every full block's hash of `tokens`, reusing those
    of the longest known prefix; `compute(known)` extends a list of the first hashes to all.

    >>> calls = []
    >>> def compute(tokens):  # a "hash": the tokens up to the block's end
    ...     def extend(known):
    ...         n = len(tokens) // 2
    ...         calls.append(n - len(known))
    ...         return known + [tuple(tokens[:2 * (i + 1)]) for i in range(len(known), n)]
    ...     return extend
    >>> m = HashMemo(block_size=2)
    >>> m.hashes([1, 2, 3, 4], None, compute([1, 2, 3, 4]))[-1]
    (1, 2, 3, 4)
    >>> m.hashes([1, 2, 3, 4, 5, 6], None, compute([1, 2, 3, 4, 5, 6]))[-1], calls
    ((1, 2, 3, 4, 5, 6), [2, 1])
    """

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.trie = PrefixTrie(unit=block_size)
        self._stored: dict[int, list] = {}  # id(trie node) -> hashes of its [d0, d1)
        self.reused = 0  # hashes taken from the memo
        self.computed = 0  # hashes computed

    def hashes(self, tokens: Sequence[int], namespace: Hashable,
               compute: Callable[[list], list]) -> list:
        num_full = len(tokens) // self.block_size
        walk = self.trie.walk(tokens, namespace, num_full)
        known: list = []
        for node, lo, hi in walk.pieces:
            stored = self._stored[id(node)]
            known.extend(stored[lo - node.d0:hi - node.d0])
        self.reused += len(known)
        out = compute(known)
        self.computed += len(out) - walk.pos
        if walk.pos < num_full:
            new = self.trie.insert(tokens, namespace, num_full, None, walk)
            node = new.node
            self._stored[id(node)] = out[node.d0:node.d1]
        return out
