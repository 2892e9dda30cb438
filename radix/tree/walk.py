"""The walk down the tree: which child an edge hangs under, how much of its edge a key shares.

Follows SGLang 0.5.23's `_match_prefix_helper` / `_insert_helper` (mem_cache/radix_cache.py):
from the root, take the child filed under the key's next token (or page), compare its edge with
the key, go on while whole edges match. `EdgeMatcher.shared_len` is one hop's compare, for any
node with a `key` (RadixCache's TreeNode, the host tier's HostNode, whose insert interleaves its
own work between hops); `walk` is the whole descent of match and insert, splitting the edge a
match ends inside. Leaves out: what a cache does on the way (locks, hits, tiers: the callers').
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from radix.tokens import TokenRuns
from radix.tokens.runs import PrefixProbe, gallop_match
from radix.tree.key import RadixKey, child_key_at

GUARD_MIN_LEN = 64  # a first edge at least this long is compared in place (PrefixProbe)


class EdgeMatcher:
    """Compares keys with edges of one tree (one page size). An edge is compared whole with one
    slice compare; a long first edge (a shared system prompt, compared on every request) in
    place, without copying the key (a PrefixProbe guard kept on the node as `guarded_key`,
    built once per edge; split_edge drops it); a compact key (TokenRuns) run by run.

    >>> from radix.tree.node import TreeNode
    >>> edge = TreeNode(1, RadixKey([1, 2, 3, 4]), [0, 1, 2, 3], 0.0)
    >>> EdgeMatcher(1).shared_len([1, 2, 3, 4, 5], 0, 5, edge)  # the whole edge
    4
    >>> EdgeMatcher(1).shared_len([9, 1, 2, 7], 1, 4, edge), EdgeMatcher(2).shared_len(
    ...     [9, 1, 2, 3, 7], 1, 5, edge)  # 2 tokens; 3 tokens, floored to a page of 2
    (2, 2)
    """

    __slots__ = ("page_size", "_probe")

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._probe = PrefixProbe()  # compares long first edges without slicing the key

    def shared_len(self, tok: Any, pos: int, n: int, child: Any) -> int:
        """Tokens of child's edge that tok[pos:n] shares, in whole pages: len(edge) when the
        whole edge matches (n - pos is a whole number of pages)."""
        edge = child.key.token_ids
        m = len(edge)
        if n - pos < m:
            same = False
        elif tok.__class__ is not list and isinstance(tok, TokenRuns) and isinstance(
                edge, TokenRuns):
            same = tok.matches_at(pos, edge)
        elif pos or m < GUARD_MIN_LEN:
            same = tok[pos : pos + m] == edge  # usually the whole edge matches
        else:  # a long first edge (a shared system prompt): no copy of the key's tokens
            same = self.starts_with(tok, child, m)
        if same:
            return m
        m = gallop_match(edge, tok[pos:n])
        ps = self.page_size
        return m - m % ps if ps > 1 else m

    def starts_with(self, tok: Any, child: Any, m: int) -> bool:
        """tok[:m] == child's edge (m tokens, len(tok) >= m) for a child of the root; two lists
        are scanned in place by the PrefixProbe against the edge + probe, built once per edge
        (and dropped when the edge is cut)."""
        edge = child.key.token_ids
        if tok.__class__ is not list or edge.__class__ is not list:
            return tok[:m] == edge
        if len(tok) == m:  # the probe would not be reached (see PrefixProbe)
            return tok == edge
        guarded = child.guarded_key
        if guarded is None:
            guarded = child.guarded_key = self._probe.guard(edge)
        return self._probe.starts_with(tok, guarded)


def walk(root: Any, key: RadixKey, matcher: EdgeMatcher, t: float,
         split: Callable[[Any, int, float], Any]) -> tuple[list, int, Any]:
    """The one walk of match and insert: follows key (page-floored) from `root`, writing time
    `t` to the root and every node entered; where the match ends inside an edge, that node is
    cut by `split(child, matched, t)` (a cache's split, returning the new upper node) and the
    walk stops. Returns (the nodes of the matched path, root excluded and split nodes
    included, the matched length, the lower half of the edge cut or None).

        root -- [1 2 3 4] -- ...     key [1 2 9]: the match ends after 2 tokens of the edge
        root -- [1 2] -- [3 4] -- ...   so the edge is cut there and [1 2] ends the path

    >>> from radix.tree.node import TreeNode, attach, split_edge
    >>> root = TreeNode(0, RadixKey([]), [], 0.0)
    >>> attach(root, TreeNode(1, RadixKey([1, 2, 3, 4]), [5, 6, 7, 8], 0.0), 1)
    >>> cut = lambda child, m, t: split_edge(child, 2, m, t, 1)
    >>> path, matched, lower = walk(root, RadixKey([1, 2, 9]), EdgeMatcher(1), 1.0, cut)
    >>> [x.key.token_ids for x in path], matched, lower.key.token_ids
    ([[1, 2]], 2, [3, 4])
    """
    tok, ps = key.token_ids, matcher.page_size
    root.last_access_time = t
    n = len(tok)
    if ps > 1:
        n -= n % ps
    ns = key.namespace
    shared = matcher.shared_len
    node, pos, path = root, 0, []
    while pos < n:
        child = node.children.get(child_key_at(tok, pos, ps, ns))
        if child is None:
            break
        child.last_access_time = t
        m = shared(tok, pos, n, child)
        if m < len(child.key.token_ids):
            path.append(split(child, m, t))
            return path, pos + m, child
        pos += m
        node = child
        path.append(node)
    return path, pos, None
