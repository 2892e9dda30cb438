"""RadixCache: a faithful model of SGLang's radix tree of cached KV prefixes (SGLang 0.5.23,
mem_cache/radix_cache.py). This file holds the class: match, insert, split, evict, locks, sizes
and the observation hooks; radix/tree/ keeps the rest one concept a file, as SGLang's mem_cache:
key.py (RadixKey), node.py (TreeNode and the edge links), walk.py, results.py, evict_policy.py,
unified.py (the unified flavor), lifecycle.py (a request's calls), snapshot.py (TreeSnapshot,
format_tree), invariants.py, and replay.py (TreeModel, EventLog: a consumer of the events).

An edge is a run of tokens used by exactly the same requests; a node is where two of them
stopped agreeing. The cache, read top to bottom:

    match_prefix   the longest cached prefix of a key; splits the node the match ends inside
    insert         caches a key: walks what is cached, grows one new leaf for the rest
    evict          pops evictable leaves in policy order; a parent left childless competes too
    inc/dec_lock_ref   walk to the root; tokens move between evictable and protected on 0 <-> 1
    checkpoint / release_kv_cache   a request's KV into the tree, its lock moved or dropped
                   (lifecycle.py; cache_unfinished_req / cache_finished_req are the same)

Deliberate differences (tools/diff_sglang.py checks the rest against SGLang's own code): time is
an injected clock (read once per walk and once per new node, where SGLang reads
time.monotonic()); evict keeps its heap across calls (`EvictionHeap`); ties go to the older node
id; insert page-aligns its key (SGLang's callers do); node ids belong to the cache; every
mutation is emitted as an event. `flavor="unified"` (the default) follows 0.5.23's
UnifiedRadixCache where it differs from the classic class (unified.py). Leaves out: HiCache
tiers (radix/hosttier/), EAGLE bigram keys and its `limit` view, SWA/mamba components, per-page
hash values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from radix import events as ev
from radix.request import Allocator
from radix.tokens import TokenRuns, Tokens, tokens
from radix.tree.evict_policy import EvictionHeap, get_strategy, tlru_new_node, tlru_split
from radix.tree.invariants import check_tree
from radix.tree.key import RadixKey, as_key
from radix.tree.lifecycle import RequestLifecycle
from radix.tree.node import ROOT_PRIORITY, TreeNode, attach, count_hits, detach, split_edge
from radix.tree.results import EvictResult, InsertResult, MatchResult
from radix.tree.snapshot import TreeSnapshot, format_tree, tree_states
from radix.tree.unified import FLAVORS, split_times, touched_ids
from radix.tree.walk import EdgeMatcher, walk


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


class RadixCache(RequestLifecycle, ev.StepEmitter):
    """SGLang's RadixCache over integer KV slot ids (its request calls: lifecycle.py).

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
        flavor: str = "unified",
        kv_sink: ev.EventSink | None = None,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {', '.join(FLAVORS)}, got {flavor!r}")
        self.flavor = flavor  # which SGLang class the tree follows (`split_times`)
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.page_size = page_size
        self.eviction_policy = eviction_policy.lower()
        self.policy_config = dict(policy_config or {})
        self.sort_key = get_strategy(self.eviction_policy, self.policy_config)
        self._tlru = self.eviction_policy == "tlru"  # keeps the T-LRU depths on the nodes
        self.clock = clock if clock is not None else LogicalClock()
        self._sink = sink
        # hears only what is stored and evicted (KeyInserted, LeafEvicted), as SGLang's
        # kv_event_queue / vLLM's enable_kv_cache_events: no steps, and the fast paths stay on
        self.kv_sink = kv_sink
        self.disable = disable
        self.allocator = allocator  # where evicted and duplicate slots go back (None: nowhere)
        self._edges = EdgeMatcher(page_size)  # compares keys with edges (walk.py)
        self.num_steps = 0  # public calls made so far (the event log's step counter)
        self.reset()

    def reset(self) -> None:
        """Empties the tree (slots of cached nodes are not freed: the caller owns the pool)."""
        self._begin("reset")
        self._next_id = 1
        self.root_node = TreeNode(0, RadixKey([]), [], 0.0)
        self.root_node.lock_ref = 1  # the root is never evicted
        self.root_node.priority = ROOT_PRIORITY
        self._nodes: dict[int, TreeNode] = {0: self.root_node}  # live nodes by id
        self._leaves = EvictionHeap(self.sort_key)
        self.evictable_size_ = 0
        self.protected_size_ = 0
        self._emit(ev.CacheReset())
        self._end("reset")

    # ----------------------------------------------------------------------- match and insert

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
        if type(key) is not RadixKey:
            key = as_key(key)
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
        *,
        inserted_len: int = 0,
    ) -> InsertResult:
        """Caches `key` with KV slots `value` (the token ids when None); returns the prefix
        length that was already cached. Existing values are never overwritten: the caller frees
        its own slots below prefix_len. Every node walked and created takes max(priority).

        Hits follow SGLang 0.5.23's InsertParams.inserted_len: the caller already inserted
        key[:inserted_len], so only nodes ending past it count a hit. `chunked=True` (the seed
        chapter's flag: raise priorities, count no hit) is inserted_len=len(key).

        >>> c = RadixCache(); c.insert([1, 2, 3]).prefix_len, c.insert([1, 2, 3, 4]).prefix_len
        (0, 3)
        >>> c.total_size(), c.insert([1, 2, 3, 4, 5], inserted_len=4).last_node.hit_count
        (4, 1)
        >>> [n.hit_count for n in c.root_node.children.values()]  # [1 2 3] ended before 4
        [2]
        """
        key = as_key(key)
        self._begin("insert", rid, "key of {:,} tokens", len(key))
        result = self._insert(key, value, priority or 0, len(key) if chunked else inserted_len)
        self._end("insert")
        return result

    def _match(self, key: RadixKey) -> MatchResult:
        if self.disable or len(key.token_ids) < self.page_size:
            return MatchResult([], self.root_node, 0)
        path, prefix_len, cut, t = self._walk(key)
        node = path[-1] if path else self.root_node
        self._leaves.touch(node)
        self._record_match(path, cut, t, self._aligned(key), prefix_len)
        return MatchResult([n.value for n in path], node, prefix_len)

    def _insert(self, key: RadixKey, value, priority: int, inserted_len: int) -> InsertResult:
        if self.disable:
            return InsertResult(0, self.root_node)
        n = self._aligned(key)  # an unaligned tail is never cached
        value = key.token_ids if value is None else _check_value(value, len(key))
        if self.kv_sink is not None:
            self.kv_sink.emit(ev.KeyInserted(key.token_ids, key.namespace))
        path, prefix_len, cut, t = self._walk(key)
        walked = len(path)
        node = path[-1] if path else self.root_node
        if prefix_len < n:
            # a whole key becomes the leaf's own (shared, as Tokens are: radix/tokens/)
            edge = key if prefix_len == 0 and n == len(key) else key[prefix_len:n]
            node = self._add_leaf(node, edge, value[prefix_len:n], priority)
            path.append(node)
        # a node counts a hit when it ends past inserted_len (SGLang: total_prefix_length >
        # inserted_len); path ends grow, so the counted nodes are a suffix of the path
        first, end = len(path), 0
        for i, x in enumerate(path):
            end += len(x.key)
            if end > inserted_len:
                first = i
                break
        count_hits(self.root_node, path, priority, first)
        self._leaves.touch(node)
        self._record_insert(path, walked, cut, t, priority, first)
        return InsertResult(prefix_len, node)

    def _walk(self, key: RadixKey) -> tuple[list[TreeNode], int, TreeNode | None, float]:
        """The one walk of match and insert (walk.py's `walk`) at one clock read: (the nodes of
        the matched path, root excluded and split nodes included, the matched length, the lower
        half of the edge cut or None, the walk's time) for the caller's observation hook."""
        t = self.clock()
        path, pos, cut = walk(self.root_node, key, self._edges, t, self._split_node)
        return path, pos, cut, t

    # ------------------------------------------------------------------ observation hooks
    # One per mutation site (as SGLang's _record_store_event / _record_remove_event): each
    # says nothing when no sink listens.

    def _record_match(self, path, cut, t: float, key_len: int, prefix_len: int) -> None:
        if self._sink is not None:
            self._sink.emit(ev.NodesTouched(touched_ids(path, cut, self.flavor), t))
            self._sink.emit(ev.PrefixMatched(tuple(x.id for x in path), key_len, prefix_len))

    def _record_insert(self, path, walked: int, cut, t: float, priority: int,
                       first: int) -> None:
        """path[:walked] was walked, the rest added; nodes from `first` on counted a hit."""
        if self._sink is not None:
            self._sink.emit(ev.NodesTouched(touched_ids(path[:walked], cut, self.flavor), t))
            self._sink.emit(ev.HitCounted(tuple(x.id for x in path), priority,
                                          first < len(path), first))

    def _record_split(self, child: TreeNode, new: TreeNode, created: float) -> None:
        if self._sink is not None:
            self._sink.emit(ev.NodeSplit(child.id, new.id, new.parent.id, len(new.key), created,
                                         new.creation_time if new.creation_time != created
                                         else None))
            if self.flavor == "unified":
                self._sink.emit(ev.NodesTouched((child.id,), child.last_access_time))

    def _record_new_leaf(self, leaf: TreeNode) -> None:
        if self._sink is not None:
            key = leaf.key
            self._sink.emit(ev.NodeInserted(leaf.id, leaf.parent.id, tokens(key.token_ids),
                                            tokens(leaf.value), leaf.priority,
                                            leaf.creation_time, key.extra_key, key.cache_salt))

    def _record_leaf_set(self, node: TreeNode, is_leaf: bool) -> None:
        if self._sink is not None:
            ids = (node.id,)
            self._sink.emit(ev.LeafSetChanged(ids, ()) if is_leaf else ev.LeafSetChanged((), ids))

    def _split_node(self, child: TreeNode, split_len: int, t: float) -> TreeNode:
        """Cuts child's edge after split_len tokens (split_edge, the replay model's split
        too); returns the new prefix node (parent side). Sizes and the leaf set do not change.
        subtle: the new node reads the clock itself (SGLang's TreeNode constructor reads
        time.monotonic()), so it is younger than the walk's time `t`, which the child keeps.
        """
        created = self.clock()
        new = split_edge(child, self._next_id, split_len, created, self.page_size)
        self._next_id += 1
        if self._tlru:
            tlru_split(new, child, split_len)
        self._nodes[new.id] = new
        if self.flavor == "unified":  # the new node keeps the child's age (split_times)
            split_times(self, new, child)
        self._record_split(child, new, created)
        self._leaves.touch(child)  # the walk touched it before cutting: its sort key moved
        return new

    def _add_leaf(self, parent: TreeNode, key: RadixKey, value, priority: int) -> TreeNode:
        t = self.clock()  # a new node reads the clock itself, as in SGLang (see _split_node)
        leaf = TreeNode(self._next_id, key, value, t)
        self._next_id += 1
        leaf.priority = priority
        attach(parent, leaf, self.page_size)
        if self._tlru:
            tlru_new_node(leaf, parent)
        self._nodes[leaf.id] = leaf
        self.evictable_size_ += len(key)
        self._record_new_leaf(leaf)
        self._update_leaf_status(parent)
        self._update_leaf_status(leaf)
        return leaf

    # ---------------------------------------------------------------------------------- evict

    def evict(self, num_tokens: int) -> EvictResult:
        """Frees at least `num_tokens` (whole leaves, in policy order) or all that is evictable.
        A parent whose last child goes becomes a leaf and competes in the same call.

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); _ = c.insert([1, 2, 4])
        >>> r = c.evict(1); r.num_evicted, c.total_size()  # the older leaf [3] goes first
        (1, 3)
        """
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        self._begin("evict", None, "{:,} tokens", num_tokens)
        evicted: list[TreeNode] = []
        num_evicted = 0
        while not self.disable and num_evicted < num_tokens:
            node = self._leaves.pop()
            if node is None:
                break
            num_evicted += len(node.value)
            self._delete_leaf(node)
            evicted.append(node)
        self._end("evict")
        return EvictResult(num_evicted, evicted)

    def _delete_leaf(self, node: TreeNode) -> None:
        parent = detach(node, self.page_size)
        del self._nodes[node.id]
        self._leaves.discard(node)
        self.evictable_size_ -= len(node.key)
        slot_ids, node.value = node.value, None  # evicted
        self._free(slot_ids)
        self._record_evicted(node, parent, slot_ids)
        self._update_leaf_status(parent)  # it may become a candidate in this same call

    def _record_evicted(self, node: TreeNode, parent: TreeNode, slot_ids) -> None:
        """The observation hook of an eviction: the step's events to the sink, the path's
        tokens to the kv sink (node is already out of the tree; its parent links remain)."""
        if self._sink is not None:
            self._sink.emit(ev.LeafSetChanged((), (node.id,)))
            self._sink.emit(ev.NodeEvicted(node.id, parent.id, len(slot_ids), tokens(slot_ids),
                                           node.heap_key))
        if self.kv_sink is not None:
            parts, x = [], node
            while x.parent is not None:
                parts.append(x.key.token_ids)
                x = x.parent
            parts.reverse()
            self.kv_sink.emit(ev.LeafEvicted(node.id, _concat_tokens(parts), node.key.namespace,
                                             len(node.key)))

    def _update_leaf_status(self, node: TreeNode) -> None:
        """node is an evictable leaf iff it is live, unlocked, not the root and has no child.

        subtle: children are always live here (evict deletes a leaf from its parent), so "no
        live child" is "no child", as in SGLang's plain RadixCache.
        """
        is_leaf = node.lock_ref == 0 and not node.children and node.value is not None
        leaves = self._leaves
        if is_leaf == (node in leaves.leaves):
            return
        if is_leaf:
            leaves.add(node)
        else:
            leaves.discard(node)
        self._record_leaf_set(node, is_leaf)

    # ---------------------------------------------------------------------------------- locks

    def inc_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Locks node and its ancestors; returns the change of evictable_size (<= 0).

        >>> c = RadixCache(); leaf = c.insert([1, 2, 3]).last_node
        >>> c.inc_lock_ref(leaf), c.protected_size(), c.evictable_size()
        (-3, 3, 0)
        """
        if type(node) is not TreeNode or self._nodes.get(node.id) is not node:
            self._check_live(node)  # raises
        self._begin("inc_lock_ref", rid, "node {}", node.id)
        delta = self._lock(node, +1)
        self._end("inc_lock_ref")
        return delta

    def dec_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Releases a lock taken by inc_lock_ref(node); returns the change of evictable_size."""
        if type(node) is not TreeNode or self._nodes.get(node.id) is not node:
            self._check_live(node)  # raises
        root = self.root_node
        if not node.locks_held and node is not root and not self.disable:
            raise ValueError(
                f"dec_lock_ref: node {node.id} holds no lock (lock_ref {node.lock_ref})"
            )
        self._begin("dec_lock_ref", rid, "node {}", node.id)
        delta = self._lock(node, -1)
        self._end("dec_lock_ref")
        return delta

    def _lock(self, node: TreeNode, direction: int) -> int:
        """The lock walk: lock_ref += direction from node up to the root (excluded). A node's
        tokens move from evictable to protected when its lock_ref leaves 0 (and back when it
        returns to 0). Returns the change of evictable_size.

            root -- a(r=0) -- b(r=0) -- c(r=0)    inc_lock_ref(c): c, b, a each become r=1,
            root -- a(r=1) -- b(r=1) -- c(r=1)    and their tokens are protected
        """
        if self.disable or node is self.root_node:
            return 0  # the root's lock_ref stays 1: locking it is a no-op, as in SGLang
        node.locks_held += direction
        start, root, moved_total = node, self.root_node, 0
        edge = 0 if direction > 0 else 1  # the lock_ref at which a node's tokens move
        sink = self._sink
        while node is not root:
            moved = 0
            if node.lock_ref == edge:
                moved = len(node.value)  # == len(node.key); a list's len is cheaper
                moved_total += moved
            node.lock_ref += direction
            if sink is not None:  # one LockChanged a hop
                sink.emit(ev.LockChanged(node.id, node.lock_ref, direction, moved))
            node = node.parent
        if moved_total:
            self.evictable_size_ -= direction * moved_total
            self.protected_size_ += direction * moved_total
        # only the start node can become or stop being a leaf: every node above it has a child
        if start.children:
            return -direction * moved_total
        self._update_leaf_status(start)
        return -direction * moved_total

    def node_start(self, node: TreeNode) -> int:
        """Where node's edge starts in its path: the tokens on the edges above it.

            root -- [1 2 3] -- [4 5] -- [6]     node_start of [6] is 3 + 2 = 5

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); leaf = c.insert([1, 2, 3, 4, 5]).last_node
        >>> c.node_start(leaf), c.node_start(c.root_node)
        (3, 0)
        """
        start, node = 0, node.parent
        while node is not None:
            start += len(node.key)
            node = node.parent
        return start

    # ------------------------------------------------------------------------- sizes, looking

    def evictable_size(self) -> int:
        return self.evictable_size_

    def protected_size(self) -> int:
        """Tokens in locked nodes (in use by running requests)."""
        return self.protected_size_

    def total_size(self) -> int:
        return self.evictable_size_ + self.protected_size_

    @property
    def evictable_leaves(self) -> set[TreeNode]:
        """SGLang's set of unlocked, childless nodes: what evict may take next."""
        return self._leaves.leaves

    def node(self, node_id: int) -> TreeNode:
        """The live node with this id (KeyError when evicted or unknown)."""
        return self._nodes[node_id]

    def snapshot(self) -> TreeSnapshot:
        """The tree as plain immutable data for drawing and comparing: nodes in pre-order,
        siblings sorted by child key (default namespace first, then by first page)."""
        ps = self.page_size
        return TreeSnapshot(tree_states(self.root_node, self._leaves.leaves, ps), ps,
                            self.evictable_size_, self.protected_size_, self.num_steps)

    def pretty_print(self, decode: Callable[[list[int]], str] | None = None,
                     show_hits: bool = False, mark_leaves: bool = False, file=None, *,
                     ids: Callable[[Any], str] | None = None) -> str:
        """Prints (and returns) SGLang's pretty_print lines; see format_tree (`ids`:
        how a node's tokens are shown, e.g. a Mooncake trace's hash ids)."""
        text = format_tree(self.snapshot(), decode, show_hits, mark_leaves, ids=ids)
        print(text, file=file)
        return text

    def check_invariants(self) -> None:
        """Raises InvariantError on the first broken rule: links, child keys, lock counts
        against the locks held, sizes, the leaf set, the eviction heap, live nodes only
        (invariants.py's `check_tree`).

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); c.evictable_size_ = 99
        >>> c.check_invariants()
        Traceback (most recent call last):
        ...
        radix.tree.invariants.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
        """
        check_tree(self)

    # -------------------------------------------------------------------------------- helpers

    def _aligned(self, key: RadixKey) -> int:
        n = len(key)
        return n if self.page_size == 1 else n // self.page_size * self.page_size

    def _check_live(self, node: TreeNode) -> None:
        if not isinstance(node, TreeNode):
            raise TypeError(f"expected a TreeNode, got {type(node).__name__}")
        if self._nodes.get(node.id) is not node:
            raise ValueError(f"node {node.id} is not a live node of this tree (evicted or foreign)")

    def _free(self, slot_ids: Sequence[int]) -> None:
        if self.allocator is not None and len(slot_ids):
            self.allocator.free(slot_ids)



def _concat_tokens(parts: list) -> Tokens:
    if parts and isinstance(parts[0], TokenRuns):
        return TokenRuns.concat(parts)
    return [t for part in parts for t in part]


def _check_value(value: Sequence[int], length: int) -> Sequence[int]:
    # only slices of it are stored, so a list (or a compact sequence) needs no copy
    if type(value) is not list and not hasattr(value, "concat"):
        value = list(value)
    if len(value) != length:
        raise ValueError(f"value has {len(value)} slot ids for a key of {length} tokens")
    return value
