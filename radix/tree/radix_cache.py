"""RadixCache: a faithful model of SGLang's radix tree of cached KV prefixes.

Follows SGLang 0.5.x mem_cache/radix_cache.py: match_prefix splits a node when a match ends inside
its edge (split-on-read), insert dedupes against what is cached and grows one new leaf, lock_ref
walks to the root, evict pops evictable leaves by the policy's sort key and cascades to parents.
Differences, all deliberate: evict keeps a heap across calls (SGLang heapifies every leaf on each
call; the pop order is the same), ties are broken by node id, time is an injected clock (read once
per walk and once per new node, where SGLang reads time.monotonic()), insert page-aligns its key
(SGLang's callers do), and every mutation is emitted as an event. tools/diff_sglang.py checks all
this against SGLang's own radix_cache.py.
Leaves out: HiCache tiers, EAGLE bigram keys, KV-event hashing (see radix/kv_events.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from radix import events as ev
from radix.sched.allocator import Allocator
from radix.tree.eviction import get_strategy
from radix.tree.key import RadixKey, gallop_match
from radix.tree.node import EvictResult, InsertResult, MatchResult, TreeNode
from radix.tree.tree_base import TreeBase

HEAP_SLACK = 64  # stale heap entries tolerated beyond 2 per evictable leaf before a rebuild


class LogicalClock:
    """A counter: each read returns the next integer as a float, so runs replay exactly.

    >>> c = LogicalClock(); c(), c()
    (1.0, 2.0)
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class RadixCache(TreeBase):
    """SGLang's RadixCache over integer KV slot ids.

    >>> c = RadixCache()
    >>> c.insert(RadixKey([1, 2, 3])).prefix_len, c.insert(RadixKey([1, 2, 4])).prefix_len
    (0, 2)
    >>> c.match_prefix(RadixKey([1, 2, 4, 9])).prefix_len
    3
    """

    def __init__(
        self,
        page_size: int = 1,
        eviction_policy: str = "lru",
        policy_config: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
        sink: ev.EventSink | None = None,
        disable: bool = False,
        allocator: Allocator | None = None,
    ) -> None:
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.page_size = page_size
        self.eviction_policy = eviction_policy.lower()
        self.policy_config = dict(policy_config or {})
        self.sort_key = get_strategy(self.eviction_policy, self.policy_config)
        self.clock = clock if clock is not None else LogicalClock()
        self._sink = sink
        self.disable = disable
        self.allocator = allocator
        self.num_steps = 0
        self.reset()

    # ----------------------------------------------------------------------------- public API

    def reset(self) -> None:
        """Empties the tree (slots of cached nodes are not freed: the caller owns the pool)."""
        self._begin("reset")
        self._next_id = 1
        self.root_node = TreeNode(0, RadixKey([]), [], 0.0)
        self.root_node.lock_ref = 1  # the root is never evicted
        self.root_node.priority = -(2**63)  # any real priority overrides it (SGLang: -maxsize)
        self._nodes: dict[int, TreeNode] = {0: self.root_node}
        self._held: dict[TreeNode, int] = {}  # node -> locks taken on it by inc_lock_ref
        self.evictable_leaves: set[TreeNode] = set()
        self._heap: list = []  # (sort_key, node_id, heap_version, node), lazily invalidated
        self.evictable_size_ = 0
        self.protected_size_ = 0
        self._emit(ev.CacheReset())
        self._end("reset")

    def match_prefix(self, key: RadixKey | Sequence[int], rid: str | None = None) -> MatchResult:
        """Longest cached prefix of `key`, page-aligned; splits the node a match ends inside.

        Writes one access time to the root and each node entered; never changes hit_count or
        priority. With disable=True, every match is empty.

        >>> c = RadixCache(); _ = c.insert(RadixKey([1, 2, 3, 4]))
        >>> r = c.match_prefix(RadixKey([1, 2, 9])); r.prefix_len, len(c.root_node.children)
        (2, 1)
        >>> [len(n.key) for n in c.root_node.children.values()]  # [1,2,3,4] split into 2 + 2
        [2]
        """
        key = self._as_key(key)
        self._begin("match_prefix", rid, "key of {:,} tokens", len(key))
        result = self._match(key)
        self._end("match_prefix")
        return result

    def insert(
        self,
        key: RadixKey | Sequence[int],
        value: Sequence[int] | None = None,
        priority: int = 0,
        chunked: bool = False,
        rid: str | None = None,
    ) -> InsertResult:
        """Caches `key` with KV slots `value` (the token ids when None); returns the prefix
        length that was already cached. Existing values are never overwritten: the caller frees
        its own slots below prefix_len.

        >>> c = RadixCache(); c.insert([1, 2, 3]).prefix_len, c.insert([1, 2, 3, 4]).prefix_len
        (0, 3)
        >>> c.total_size()
        4
        """
        key = self._as_key(key)
        self._begin("insert", rid, "key of {:,} tokens", len(key))
        result = self._insert(key, value, priority or 0, chunked)
        self._end("insert")
        return result

    def evict(self, num_tokens: int) -> EvictResult:
        """Frees at least `num_tokens` (whole leaves, in policy order) or all that is evictable.

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); _ = c.insert([1, 2, 4])
        >>> r = c.evict(1); r.num_evicted, c.total_size()  # the older leaf [3] goes first
        (1, 3)
        """
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        self._begin("evict", None, "{:,} tokens", num_tokens)
        result = self._evict(num_tokens)
        self._end("evict")
        return result

    def inc_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Locks node and its ancestors; returns the change of evictable_size (<= 0)."""
        self._check_live(node)
        self._begin("inc_lock_ref", rid, "node {}", node.id)
        delta = self._inc_lock(node)
        self._end("inc_lock_ref")
        return delta

    def dec_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Releases a lock taken by inc_lock_ref(node); returns the change of evictable_size."""
        self._check_live(node)
        if self._held.get(node, 0) == 0 and node is not self.root_node and not self.disable:
            raise ValueError(
                f"dec_lock_ref: node {node.id} holds no lock (lock_ref {node.lock_ref})"
            )
        self._begin("dec_lock_ref", rid, "node {}", node.id)
        delta = self._dec_lock(node)
        self._end("dec_lock_ref")
        return delta

    def evictable_size(self) -> int:
        return self.evictable_size_

    def protected_size(self) -> int:
        """Tokens in locked nodes (in use by running requests)."""
        return self.protected_size_

    def total_size(self) -> int:
        return self.evictable_size_ + self.protected_size_

    def node(self, node_id: int) -> TreeNode:
        """The live node with this id (KeyError when evicted or unknown)."""
        return self._nodes[node_id]

    # ------------------------------------------------------------------------- the walks

    def _match(self, key: RadixKey) -> MatchResult:
        root = self.root_node
        if self.disable or len(key) < self.page_size:
            return MatchResult([], root, 0)
        ps = self.page_size
        tok = key.token_ids
        n = len(tok) // ps * ps
        t = self.clock()
        root.last_access_time = t
        path = [root] if self._sink is not None else None
        node, pos, out = root, 0, []
        ns = key.namespace
        while pos < n:
            child = node.children.get(self._child_key_at(tok, pos, ns))
            if child is None:
                break
            child.last_access_time = t
            if path is not None:
                path.append(child)
            plen = self._match_len(child.key.token_ids, tok, pos, n)
            if plen < len(child.key):
                node = self._split(child, plen, t)
                out.extend(node.value)
                pos += plen
                break
            out.extend(child.value)
            node, pos = child, pos + plen
        self._after_touch(node, t)
        if path is not None:
            self._emit(ev.NodesTouched(tuple(x.id for x in path), t))
            self._emit(ev.PrefixMatched(tuple(x.id for x in path[1:]), n, pos))
        return MatchResult(out, node, pos)

    def _insert(self, key: RadixKey, value, priority: int, chunked: bool) -> InsertResult:
        root = self.root_node
        if self.disable:
            return InsertResult(0, root)
        ps = self.page_size
        tok = key.token_ids
        n = len(tok) // ps * ps  # SGLang's callers page-align; an unaligned tail is never cached
        value = list(tok) if value is None else self._as_value(value, len(tok))
        t = self.clock()
        root.last_access_time = t
        root.priority = max(root.priority, priority)
        touched = [root] if self._sink is not None else None
        hits: list[TreeNode] = []
        node, pos, ns = root, 0, key.namespace
        while pos < n:
            child = node.children.get(self._child_key_at(tok, pos, ns))
            if child is None:
                break
            child.last_access_time = t
            if touched is not None:
                touched.append(child)
            plen = self._match_len(child.key.token_ids, tok, pos, n)
            pos += plen
            node = self._split(child, plen, t) if plen < len(child.key) else child
            node.priority = max(node.priority, priority)
            hits.append(node)
        prefix_len = pos
        if pos < n:
            leaf = self._add_leaf(node, key[pos:n], value[pos:n], priority)
            hits.append(leaf)
            node = leaf
        if not chunked:
            for x in hits:
                x.hit_count += 1
        self._after_touch(node, t)
        if touched is not None:
            self._emit(ev.NodesTouched(tuple(x.id for x in touched), t))
            self._emit(ev.HitCounted(tuple(x.id for x in hits), priority, not chunked))
        return InsertResult(prefix_len, node)

    def _split(self, child: TreeNode, split_len: int, t: float) -> TreeNode:
        """Cuts child's edge after split_len tokens; returns the new prefix node (parent side).

        new_node -> child: the new node inherits lock_ref, hit_count and priority (it stands
        for the same requests); values are sliced copies; sizes and the leaf set do not change.
        subtle: the new node reads the clock itself (SGLang's TreeNode constructor reads
        time.monotonic()), so it is younger than the walk's time `t`, which the child keeps.
        """
        ps = self.page_size
        created = self.clock()
        new = TreeNode(self._next_id, child.key[:split_len], child.value[:split_len], created)
        self._next_id += 1
        new.parent = parent = child.parent
        new.lock_ref, new.hit_count, new.priority = child.lock_ref, child.hit_count, child.priority
        child.key = child.key[split_len:]
        child.value = child.value[split_len:]
        child.parent = new
        new.children = {child.key.child_key(ps): child}
        parent.children[new.key.child_key(ps)] = new  # same dict slot, so the order is kept
        self._nodes[new.id] = new
        if self._sink is not None:
            self._emit(ev.NodeSplit(child.id, new.id, parent.id, split_len, created))
        self._after_touch(child, t)  # the walk touched it before cutting: its sort key moved
        return new

    def _add_leaf(self, parent: TreeNode, key: RadixKey, value: list[int], priority: int):
        t = self.clock()  # a new node reads the clock itself, as in SGLang (see _split)
        leaf = TreeNode(self._next_id, key, value, t)
        self._next_id += 1
        leaf.parent, leaf.priority = parent, priority
        parent.children[key.child_key(self.page_size)] = leaf
        self._nodes[leaf.id] = leaf
        self.evictable_size_ += len(key)
        if self._sink is not None:
            self._emit(
                ev.NodeInserted(
                    leaf.id, parent.id, tuple(key.token_ids), tuple(value), priority, t,
                    key.extra_key, key.cache_salt,
                )
            )
        self._update_leaf_status(parent)
        self._update_leaf_status(leaf)
        return leaf

    def _child_key_at(self, tok, pos: int, ns) -> Any:
        plain = tok[pos] if self.page_size == 1 else tuple(tok[pos : pos + self.page_size])
        return plain if ns is None else (ns, plain)

    def _match_len(self, edge, tok, pos: int, end: int) -> int:
        """Shared length of an edge and tok[pos:end], page-aligned (galloping, see key.py)."""
        m = len(edge)
        if end - pos >= m and tok[pos : pos + m] == edge:
            return m  # the common case: the whole edge matches
        m = gallop_match(edge, tok[pos:end])
        return m if self.page_size == 1 else m // self.page_size * self.page_size

    # ----------------------------------------------------------------------------- helpers

    def _as_key(self, key) -> RadixKey:
        if isinstance(key, RadixKey):
            return key
        if isinstance(key, Iterable):
            return RadixKey(key)
        raise TypeError(f"expected a RadixKey or a sequence of token ids, got {type(key).__name__}")

    @staticmethod
    def _as_value(value, length: int) -> list[int]:
        if type(value) is not list:  # only slices of it are stored, so a list needs no copy
            value = list(value)
        if len(value) != length:
            raise ValueError(f"value has {len(value)} slot ids for a key of {length} tokens")
        return value

    def _check_live(self, node: TreeNode) -> None:
        if not isinstance(node, TreeNode):
            raise TypeError(f"expected a TreeNode, got {type(node).__name__}")
        if self._nodes.get(node.id) is not node:
            raise ValueError(f"node {node.id} is not a live node of this tree (evicted or foreign)")

    def _free(self, slot_ids: Sequence[int]) -> None:
        if self.allocator is not None and len(slot_ids):
            self.allocator.free(slot_ids)

    def _begin(self, op: str, rid: str | None = None, detail: str = "", *args) -> None:
        """Opens a step; `detail` is formatted with `args` only when someone listens."""
        if self._sink is not None:
            self._sink.emit(ev.StepStarted(self.num_steps, op, rid, detail.format(*args)))

    def _end(self, op: str) -> None:
        if self._sink is not None:
            self._sink.emit(ev.StepEnded(self.num_steps, op))
        self.num_steps += 1

    def _emit(self, event: ev.Event) -> None:
        if self._sink is not None:
            self._sink.emit(event)

    def _heap_push(self, node: TreeNode) -> None:
        node.heap_version += 1
        node.heap_key = key = self.sort_key(node)
        heapq.heappush(self._heap, (key, node.id, node.heap_version, node))
        if len(self._heap) > 2 * len(self.evictable_leaves) + HEAP_SLACK:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        """Drops stale entries: one fresh entry per evictable leaf, O(n)."""
        heap = []
        for node in self.evictable_leaves:
            node.heap_version += 1
            node.heap_key = key = self.sort_key(node)
            heap.append((key, node.id, node.heap_version, node))
        heapq.heapify(heap)
        self._heap[:] = heap  # in place: evict() may be holding this list

    def _after_touch(self, node: TreeNode, t: float) -> None:
        """A walk ending at an evictable leaf may have changed its sort key: if so, give it a fresh
        heap entry (while a node stays an evictable leaf its latest entry stays in the heap)."""
        if node in self.evictable_leaves and self.sort_key(node) != node.heap_key:
            self._heap_push(node)
