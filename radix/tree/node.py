"""TreeNode and the edge links every tree here runs: split, attach, detach, count hits.

Follows SGLang 0.5.23's TreeNode (mem_cache/radix_cache.py: one edge and the node it ends in,
`value` its KV slot ids). Every mutation of a tree's shape goes through the functions below:
RadixCache's walk and evict, the replay model's events (radix/tree/replay.py) and the host
tier's HostTierCache (whose HostNode is a TreeNode with a host copy), so the three stay one
tree. Deliberate difference: node ids belong to the cache, not to a process-wide counter.
Leaves out: SGLang's hash values per page and its component data (SWA, Mamba).
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.tree.key import RadixKey

ROOT_PRIORITY = -(2**63 - 1)  # the root's priority: SGLang's -sys.maxsize, below any real one


class TreeNode:
    """One edge of the radix tree and the node it ends in. `value` holds the KV slot ids of the
    edge, one per token. Node ids are given by the cache that owns the node (root = 0), not by a
    process-wide counter as in SGLang, so two runs of the same ops give the same ids."""

    __slots__ = (
        "id",
        "children",
        "parent",
        "key",
        "value",
        "lock_ref",
        "locks_held",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "heap_version",
        "heap_key",
        "guarded_key",
        "tlru_cached_prefix_len",
        "tlru_history_len",
    )

    def __init__(self, node_id: int, key: RadixKey, value: list[int] | None, time: float) -> None:
        self.id = node_id
        self.children: dict = {}  # child_key -> TreeNode, in insertion order (as SGLang)
        self.parent: TreeNode | None = None
        self.key = key  # the edge's tokens
        self.value = value  # KV slot ids of the edge; None once evicted
        self.lock_ref = 0  # running requests using this node or a node below it
        self.locks_held = 0  # inc_lock_ref calls on this very node not yet released
        self.last_access_time = time
        self.creation_time = time
        self.hit_count = 0  # requests that inserted through it, each once (past inserted_len)
        self.priority = 0  # max priority of the requests that inserted through it
        self.heap_version = 0  # bumps on each push to the eviction heap; older entries are stale
        self.heap_key = None  # the sort key of its latest heap entry
        self.guarded_key = None  # a long first edge's tokens + the cache's PrefixProbe (lazy)
        self.tlru_cached_prefix_len = 0  # T-LRU only: tokens from the root to this node's end
        self.tlru_history_len = 0  # T-LRU only: the branch's high-water depth (never shrinks)

    @property
    def evicted(self) -> bool:
        return self.value is None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, len={len(self.key)}, lock_ref={self.lock_ref})"


def split_edge(child: TreeNode, new_id: int, split_len: int, time: float,
               page_size: int) -> TreeNode:
    """Cuts child's edge after split_len tokens and returns the new upper node: the one split
    of the tree, run by RadixCache's walk, the replay model's NodeSplit and the host tier.

        parent -- child[0:split_len + rest]   becomes   parent -- new[0:split_len] -- child

    The new node, of child's class (both its times `time`), takes the edge's first split_len
    tokens and slots (sliced copies; a node whose slots are gone, value None, gives None to
    both halves), child's lock_ref, hit_count and priority (it stands for the same requests)
    and child's slot in the parent's dict (the order is kept). Anything else a node class
    carries (the host tier's host slots and locks) is the caller's to move.

    >>> root = TreeNode(0, RadixKey([]), [], 0.0)
    >>> a = TreeNode(1, RadixKey([5, 6, 7]), [0, 1, 2], 1.0); attach(root, a, 1)
    >>> new = split_edge(a, 2, 1, 3.0, 1)
    >>> new.key.token_ids, new.value, a.key.token_ids, a.parent is new, root.children[5] is new
    ([5], [0], [6, 7], True, True)
    """
    value = child.value
    new = child.__class__(new_id, child.key[:split_len],
                          None if value is None else value[:split_len], time)
    if value is not None:
        child.value = value[split_len:]
    child.guarded_key = None  # its edge changed (and it is no longer a first edge)
    cut_edge(child, new, page_size)
    return new


def cut_edge(child, new, page_size: int) -> None:
    """The links of a split, for any node with a key, children and a parent (TreeNode, the host
    tier's HostNode): `new`, holding the first len(new.key) tokens of child's edge, goes
    between child and its parent, taking child's lock_ref, hit_count, priority and slot in the
    parent's dict (the order is kept); child keeps the rest of its edge. Values are the
    caller's (split_edge slices `value`)."""
    new.parent = parent = child.parent
    new.lock_ref, new.hit_count, new.priority = child.lock_ref, child.hit_count, child.priority
    child.key = child.key[len(new.key):]
    child.parent = new
    new.children = {child.key.child_key(page_size): child}
    parent.children[new.key.child_key(page_size)] = new  # same dict slot, so the order is kept


def attach(parent: TreeNode, node: TreeNode, page_size: int) -> None:
    """Hangs `node` under `parent`, filed under its child key (a new leaf's one link)."""
    node.parent = parent
    parent.children[node.key.child_key(page_size)] = node


def detach(node: TreeNode, page_size: int) -> TreeNode:
    """Takes `node` out of its parent's children (an evicted leaf); returns the parent. The
    node keeps its parent link, so its path can still be read."""
    parent = node.parent
    del parent.children[node.key.child_key(page_size)]
    return parent


def count_hits(root, path: Sequence, priority: int, first: int) -> None:
    """What an insert leaves on the nodes it went through (SGLang 0.5.23's insert): the root
    and every node of `path` take max(priority); the nodes from `first` on count a hit. The one
    rule RadixCache's inserts and the replay model's HitCounted both apply.

    >>> class N: priority = hit_count = 0
    >>> root, a, b = N(), N(), N(); count_hits(root, [a, b], 2, 1)
    >>> root.priority, (a.priority, a.hit_count), (b.priority, b.hit_count)
    (2, (2, 0), (2, 1))
    """
    if root.priority < priority:
        root.priority = priority
    for i, x in enumerate(path):
        if x.priority < priority:
            x.priority = priority
        if i >= first:
            x.hit_count += 1
