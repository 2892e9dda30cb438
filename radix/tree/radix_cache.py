"""RadixCache: a faithful model of SGLang's radix tree of cached KV prefixes.

Follows SGLang's mem_cache/radix_cache.py. An edge is a run of tokens used by exactly the same
requests; a node is where two of them stopped agreeing. Read top to bottom:

    match_prefix   the longest cached prefix of a key; splits the node the match ends inside
    insert         caches a key: walks what is cached, grows one new leaf for the rest
    evict          pops evictable leaves in policy order; a parent left childless competes too
    inc/dec_lock_ref   walk to the root; tokens move between evictable and protected on 0 <-> 1
    checkpoint / release_kv_cache   a request's KV into the tree, its lock moved or dropped
                   (SGLang 0.5.23; cache_unfinished_req / cache_finished_req are the same)

Deliberate differences (tools/diff_sglang.py checks the rest against SGLang's own code): time is
an injected clock (read once per walk and once per new node, where SGLang reads
time.monotonic()); evict keeps its heap across calls (eviction.py); ties go to the older node id;
insert page-aligns its key (SGLang's callers do); node ids belong to the cache; every mutation is
emitted as an event. `flavor="unified"` (the default) follows 0.5.23's UnifiedRadixCache where it
differs from the classic class (radix/tree/unified.py). Leaves out: HiCache tiers, EAGLE bigram
keys, SWA/mamba components.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from radix import events as ev
from radix.allocator import Allocator
from radix.request import Req
from radix.tokens import TokenRuns, frozen
from radix.tokens.runs import PrefixProbe, gallop_match
from radix.tree import unified
from radix.tree.eviction import EvictionHeap, get_strategy, tlru_new_node, tlru_split
from radix.tree.node import (
    ROOT_PRIORITY,
    EvictResult,
    InsertResult,
    InvariantError,
    MatchResult,
    RadixKey,
    TreeNode,
    TreeSnapshot,
    attach,
    concat_values,
    count_hits,
    detach,
    format_tree,
    page_at,
    split_edge,
    tree_states,
)

FLAVORS = ("classic", "unified")  # radix_cache.RadixCache, or 0.5.23's UnifiedRadixCache
GUARD_MIN_LEN = 64  # a first edge at least this long is compared in place (PrefixProbe)
INT64_MAX = 2**63 - 1


def prompt_boundary_priority(prompt_len: int, n: int, priority: int) -> int | None:
    """SGLang 0.5.23's prompt-boundary rule of a checkpoint (both radix_cache.py and
    unified_radix_cache.py `checkpoint_into_tree`): after caching n tokens (page-aligned), the
    aligned prompt of `prompt_len` tokens is inserted alone with priority + 1 (capped at int64),
    splitting the leaf at the boundary so eviction takes the output first. The priority of
    that insert, or None when there is none (an empty prompt, or nothing cached past it).

    >>> prompt_boundary_priority(5, 8, 0), prompt_boundary_priority(8, 8, 0)
    (1, None)
    """
    return min(priority + 1, INT64_MAX) if 0 < prompt_len < n else None


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


class RadixCache:
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
        flavor: str = "unified",
        kv_sink: ev.EventSink | None = None,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {', '.join(FLAVORS)}, got {flavor!r}")
        self.flavor = flavor  # which SGLang class the tree follows (radix/tree/unified.py)
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
        self._probe = PrefixProbe()  # compares long first edges without slicing the key
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
        key = self._as_key(key)
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

    def _rematch_tail(self, node: TreeNode, prefix_len: int, need: int) -> Sequence[int]:
        """_match of a key that ends exactly at `node` (a checkpoint's key, just inserted),
        returning only the last `need` slot ids of the match: the same effects and events (one
        clock read written to the root and the path, the leaf set touched, NodesTouched and
        PrefixMatched) found by walking up the parents instead of comparing tokens down, and
        only the deepest nodes' values joined."""
        path = []
        x, root = node, self.root_node
        while x is not root:
            path.append(x)
            x = x.parent
        t = self.clock()
        root.last_access_time = t
        for x in path:
            x.last_access_time = t
        self._leaves.touch(node)
        assert sum(len(x.value) for x in path) == prefix_len, prefix_len
        self._record_match(path[::-1], None, t, prefix_len, prefix_len)
        values, got = [], 0
        for x in path:  # leaf first
            if got >= need:
                break
            values.append(x.value)
            got += len(x.value)
        values.reverse()
        tail = concat_values(values)
        return tail[got - need:] if got > need else tail

    def _raise_prompt(self, node: TreeNode, n: int, prompt_len: int, priority: int) -> None:
        """The prompt-boundary insert of a checkpoint (`_insert(key[:prompt_len], ...,
        priority, prompt_len)`) for a key of n tokens that ends at `node`, just inserted: the
        same effects (one clock read written to the root and the path, the edge holding the
        boundary split, priorities raised, the leaf set touched; nothing new cached, no hit
        counted, the same events) found by walking up from `node` instead of comparing tokens
        down. Unlike _insert, the kv sink hears no KeyInserted: nothing new is stored."""
        root = self.root_node
        end, x = n, node
        while end - len(x.key) >= prompt_len:  # x lies wholly past the boundary
            end -= len(x.key)
            x = x.parent
        t = self.clock()
        root.last_access_time = t
        x.last_access_time = t
        # the boundary falls inside x's edge: cut it there (the new upper node keeps its own
        # creation time, as after the walk's split)
        top = self._split_node(x, prompt_len - (end - len(x.key)), t) if end > prompt_len else x
        path = []
        y = top
        while y is not root:
            if y is not top:
                y.last_access_time = t
            path.append(y)
            y = y.parent
        path.reverse()
        count_hits(root, path, priority, len(path))
        self._leaves.touch(top)
        self._record_insert(path, len(path), None if top is x else x, t, priority, len(path))

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
            node = self._add_leaf(node, key[prefix_len:n], value[prefix_len:n], priority)
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
        """The one walk of match and insert: follows key from the root, writing one access time
        to the root and every node entered; where the match ends inside an edge, that node is
        split (`_split_node`) and the walk stops. Returns (the nodes of the matched path, root
        excluded and split nodes included, the matched length, the lower half of the edge cut
        or None, the walk's time) for the caller's observation hook.

            root -- [1 2 3 4] -- ...     key [1 2 9]: the match ends after 2 tokens of the edge
            root -- [1 2] -- [3 4] -- ...   so the edge is cut there and [1 2] ends the path

        An edge is compared whole with one slice compare; a long first edge (a shared system
        prompt, compared on every request) in place, without copying the key (`_starts_with`);
        a compact key (TokenRuns) run by run, in place.
        """
        t = self.clock()
        root, tok, ps = self.root_node, key.token_ids, self.page_size
        root.last_access_time = t
        n = len(tok)
        if ps > 1:
            n -= n % ps
        ns = key.namespace
        runs = isinstance(tok, TokenRuns)  # compact: compared in place, by runs
        node, pos, path = root, 0, []
        while pos < n:
            first = tok[pos] if ps == 1 else page_at(tok, pos, ps)  # the child key
            child = node.children.get(first if ns is None else (ns, first))
            if child is None:
                break
            child.last_access_time = t
            edge = child.key.token_ids
            m = len(edge)
            if n - pos < m:
                same = False
            elif runs and isinstance(edge, TokenRuns):
                same = tok.matches_at(pos, edge)
            elif pos or m < GUARD_MIN_LEN:
                same = tok[pos : pos + m] == edge  # usually the whole edge matches
            else:  # a long first edge (a shared system prompt): no copy of the key's tokens
                same = self._starts_with(tok, child, m)
            if not same:
                m = gallop_match(edge, tok[pos:n])
                if ps > 1:
                    m -= m % ps
                pos += m
                path.append(self._split_node(child, m, t))
                return path, pos, child, t
            pos += m
            node = child
            path.append(node)
        return path, pos, None, t

    # ------------------------------------------------------------------ observation hooks
    # One per mutation site (as SGLang's _record_store_event / _record_remove_event): each
    # says nothing when no sink listens.

    def _touched_ids(self, path: list[TreeNode], cut: TreeNode | None) -> tuple[int, ...]:
        """The root and each node a walk entered: `path` but, where the walk cut an edge, its
        lower half `cut` (classic) or nothing (unified: the split touched it after the walk's
        time, radix/tree/unified.py)."""
        ids = [0, *(x.id for x in path)]
        if cut is not None:
            if self.flavor == "unified":
                ids.pop()
            else:
                ids[-1] = cut.id
        return tuple(ids)

    def _record_match(self, path, cut, t: float, key_len: int, prefix_len: int) -> None:
        if self._sink is not None:
            self._sink.emit(ev.NodesTouched(self._touched_ids(path, cut), t))
            self._sink.emit(ev.PrefixMatched(tuple(x.id for x in path), key_len, prefix_len))

    def _record_insert(self, path, walked: int, cut, t: float, priority: int,
                       first: int) -> None:
        """path[:walked] was walked, the rest added; nodes from `first` on counted a hit."""
        if self._sink is not None:
            self._sink.emit(ev.NodesTouched(self._touched_ids(path[:walked], cut), t))
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
            self._sink.emit(ev.NodeInserted(leaf.id, leaf.parent.id, frozen(key.token_ids),
                                            frozen(leaf.value), leaf.priority,
                                            leaf.creation_time, key.extra_key, key.cache_salt))

    def _record_leaf_set(self, node: TreeNode, is_leaf: bool) -> None:
        if self._sink is not None:
            ids = (node.id,)
            self._sink.emit(ev.LeafSetChanged(ids, ()) if is_leaf else ev.LeafSetChanged((), ids))

    def _starts_with(self, tok, child: TreeNode, m: int) -> bool:
        """tok[:m] == child's edge (m tokens, len(tok) >= m) for a child of the root; two lists
        are scanned in place by the cache's PrefixProbe against the edge + probe, built once
        per edge (and dropped when the edge is cut)."""
        edge = child.key.token_ids
        if type(tok) is not list or type(edge) is not list:
            return tok[:m] == edge
        if len(tok) == m:  # the probe would not be reached (see PrefixProbe)
            return tok == edge
        guarded = child.guarded_key
        if guarded is None:
            guarded = child.guarded_key = self._probe.guard(edge)
        return self._probe.starts_with(tok, guarded)

    def _split_node(self, child: TreeNode, split_len: int, t: float) -> TreeNode:
        """Cuts child's edge after split_len tokens (node.split_edge, the replay model's split
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
        if self.flavor == "unified":  # the new node keeps the child's age (radix/tree/unified.py)
            unified.split_times(self, new, child)
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
            self._sink.emit(ev.NodeEvicted(node.id, parent.id, len(slot_ids), frozen(slot_ids),
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

    # ------------------------------------------------------------------------------- requests
    # The seed chapter's names (cache_finished_req, cache_unfinished_req) and SGLang 0.5.23's
    # (release_kv_cache, checkpoint) run the same code: _checkpoint and _release below.

    def checkpoint(self, req: Req, *, up_to: int) -> None:
        """SGLang 0.5.23's `checkpoint`: cache req's tokens [0, up_to) (page-floored), split at
        the prompt boundary, free the duplicates, point the row at the tree's slots and move
        the lock to the new last node. Frees nothing past the floored key (see _checkpoint).

        >>> from radix.allocator import SlotAllocator
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], slot_ids=a.alloc(3)); c.checkpoint(r, up_to=3)
        >>> r.cache_protected_len, r.last_node.lock_ref, c.protected_size()
        (3, 1, 3)
        """
        self._begin("checkpoint", req.rid, "{:,} tokens", up_to)
        self._checkpoint(req, up_to)
        self._end("checkpoint")

    def release_kv_cache(self, req: Req, *, checkpoint: bool = True) -> None:
        """SGLang 0.5.23's `release_kv_cache(req, tree_cache, checkpoint=...)`: with checkpoint,
        the request's tokens go into the tree first; then its own slots past the tree-owned
        prefix are freed and its lock is dropped. checkpoint=False (retraction, abort) inserts
        nothing.

        >>> from radix.allocator import SlotAllocator
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], slot_ids=a.alloc(3)); c.release_kv_cache(r, checkpoint=False)
        >>> c.total_size(), a.available_size()
        (0, 8)
        """
        self._begin("release_kv_cache", req.rid, "{:,} tokens", len(req.slot_ids))
        self._release(req, checkpoint, None)
        self._end("release_kv_cache")

    def cache_finished_req(self, req: Req, is_insert: bool = True,
                           kv_len_to_handle: int | None = None) -> None:
        """A request finished: cache its tokens, free what the tree already had, drop its lock.
        0.5.23's release_kv_cache(checkpoint=is_insert), over the row's first
        `kv_len_to_handle` slots (default: all of req.slot_ids; the KV of the last output
        token was never computed, so the row holds prompt + output - 1). The output is split
        off the prompt, whose nodes get priority + 1, so eviction takes the output first.

        >>> from radix.allocator import SlotAllocator
        >>> a = SlotAllocator(8); c = RadixCache(allocator=a)
        >>> r = Req("r1", [1, 2, 3], output_ids=[7, 8], slot_ids=a.alloc(4))
        >>> c.cache_finished_req(r); c.total_size(), a.available_size()
        (4, 4)
        >>> [(len(n.key), n.priority) for n in (c.node(2), c.node(1))]  # prompt, then output
        [(3, 1), (1, 0)]
        """
        self._begin("cache_finished_req", req.rid, "{:,} tokens", len(req.slot_ids))
        self._release(req, is_insert, kv_len_to_handle)
        self._end("cache_finished_req")

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """A request's prompt (or chunk) is computed: 0.5.23's checkpoint(req,
        up_to=len(req.fill_ids)). `chunked` is accepted for the seed chapter's callers and
        changes nothing: req.cache_inserted_len already makes a request count each node's hit
        once (0.5.23 dropped the flag for inserted_len).
        """
        if self.disable:
            # SGLang's ChunkCache: nothing is cached, but the request's own computed slots are
            # its prefix for the next chunk (PrefillAdder.add_chunked_req reads them).
            req.prefix_indices = req.slot_ids[: len(req.fill_ids)]
            return
        self._begin("cache_unfinished_req", req.rid, "{:,} tokens", len(req.fill_ids))
        self._checkpoint(req, len(req.fill_ids))
        self._end("cache_unfinished_req")

    def _checkpoint(self, req: Req, up_to: int) -> None:
        """Inserts req's tokens [0, up_to) page-floored, then the prompt alone with priority + 1
        (so the leaf splits at the prompt boundary), frees the request's slots the tree already
        had, points the row at the tree's slots and moves the lock (unlock old, lock new).
        Follows SGLang 0.5.23's radix_cache.py `checkpoint` / `_insert_cache`; `req.slot_ids`
        plays the request's req_to_token row:

            0 ....... cache_protected_len ....... floor(up_to) .... up_to .... len(row)
            | owned by the tree (locked) | the request's own slots | partial page | over-allocated |

        A 5-token prompt plus 3 output tokens, page 1, nothing cached: the insert makes one node
        of 8, the prompt insert splits it 5 + 3; the prompt node has priority 1, the output 0.
        """
        if self.disable:
            return
        row = req.slot_ids
        if not 0 <= up_to <= len(row):
            raise ValueError(f"request {req.rid!r}: up_to {up_to} is outside 0..{len(row)} "
                             "(the slots it holds)")
        ids = req.all_ids[:up_to]
        n = self._aligned(ids)
        key = RadixKey(ids[:n], req.extra_key, req.cache_salt)
        values = row[:n]
        priority = req.priority or 0
        result = self._insert(key, values, priority, req.cache_inserted_len)
        req.cache_inserted_len = max(req.cache_inserted_len, n)
        # the prompt-boundary split: nothing new is cached, the prompt's nodes rise to priority+1
        prompt_len = self._aligned(ids[: len(req.origin_input_ids)])
        raised = prompt_boundary_priority(prompt_len, n, priority)
        if raised is not None:  # walking up from the insert's node
            self._raise_prompt(result.last_node, n, prompt_len, raised)
        protected = req.cache_protected_len
        self._free(row[protected : result.prefix_len])  # duplicates of what the tree had
        # SGLang matches the key again for the tree's slots and node; the key ends at the first
        # insert's node (a prompt-boundary split only adds a parent above it), so the match
        # walks up from there (the same access times, leaf set and events) and joins only the
        # slots the row takes
        new_last = result.last_node
        if n:
            row[protected:n] = self._rematch_tail(new_last, n, n - protected)
        req.cache_protected_len = n
        if req.last_node is not None:
            self._lock(req.last_node, -1)
        self._lock(new_last, +1)
        req.last_node = new_last
        req.prefix_indices = row[:up_to]

    def _release(self, req: Req, insert: bool, kv_len: int | None) -> None:
        """SGLang 0.5.23's common.py `release_kv_cache`: checkpoint up to the owned length (when
        inserting), free the row's [cache_protected_len, owned) (the unaligned tail, or all the
        request computed when not inserting), unlock, then free the over-allocated rest from
        the next page boundary.

        Page 4, a row of 10 committed slots, nothing cached: the insert takes 8, the tail 8..10
        is freed, then the lock (moved to the new leaf by the checkpoint) is dropped.
        """
        row = req.slot_ids
        owned = len(row) if kv_len is None else kv_len
        if not isinstance(owned, int) or not 0 <= owned <= len(row):
            raise ValueError(f"request {req.rid!r}: kv_len_to_handle {kv_len!r} is outside "
                             f"0..{len(row)} (the slots it holds)")
        if self.disable:
            self._free(row)
            req.last_node = None
            return
        if insert:
            self._checkpoint(req, owned)
        self._free(row[req.cache_protected_len : owned])
        if req.last_node is not None:
            self._lock(req.last_node, -1)
        req.last_node = None
        # subtle: a paged allocator frees the whole page holding `owned - 1` with the tail
        # above, so the over-allocated range starts at the next page boundary (ceil_align)
        ps = getattr(self.allocator, "page_size", 1)
        self._free(row[-(-owned // ps) * ps :])

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
        """Prints (and returns) SGLang's pretty_print lines; see inspect.format_tree (`ids`:
        how a node's tokens are shown, e.g. a Mooncake trace's hash ids)."""
        text = format_tree(self.snapshot(), decode, show_hits, mark_leaves, ids=ids)
        print(text, file=file)
        return text

    def check_invariants(self) -> None:
        """Raises InvariantError on the first broken rule: links, child keys, lock counts
        against the locks held, sizes, the leaf set, the eviction heap, live nodes only.

        >>> c = RadixCache(); _ = c.insert([1, 2, 3]); c.evictable_size_ = 99
        >>> c.check_invariants()
        Traceback (most recent call last):
        ...
        radix.tree.node.InvariantError: evictable/protected sizes are 99/0, the tree holds 3/0
        """
        root = self.root_node
        if root.lock_ref != 1:
            raise InvariantError(f"root lock_ref is {root.lock_ref}, expected 1")
        reachable: dict[int, TreeNode] = {}
        leaves: set[TreeNode] = set()
        evictable = protected = 0
        stack = [root]
        fine = self._node_fine
        while stack:
            node = stack.pop()
            reachable[node.id] = node
            n = fine(node, root)
            if n < 0:
                problem = self._node_problem(node)
                if problem is not None:
                    raise InvariantError(f"node {node.id}: {problem}")
                n = len(node.key)
            if node is not root:
                if node.lock_ref == 0:
                    evictable += n
                    if not node.children:
                        leaves.add(node)
                else:
                    protected += n
            stack.extend(node.children.values())
        self._check_totals(reachable, leaves, evictable, protected)

    def _node_fine(self, node: TreeNode, root: TreeNode) -> int:
        """The length of `node`'s key when it keeps every rule of _node_problem (its fast path:
        the check runs every few requests of a long trace); -1 sends it to _node_problem."""
        value, ids = node.value, node.key.token_ids
        n, ps = len(ids), self.page_size
        if value is None or len(value) != n:
            return -1
        held = node.locks_held
        try:  # (an empty child key: _node_problem says what is wrong, or raises, as before)
            for ck, child in node.children.items():
                if child.parent is not node:
                    return -1
                held += child.lock_ref
                key = child.key
                if ps == 1 and key.extra_key is None and key.cache_salt is None:
                    if key.token_ids[0] != ck:  # child_key's plain case, inlined
                        return -1
                elif key.child_key(ps) != ck:
                    return -1
        except (IndexError, ValueError):
            return -1
        if node is not root and (n == 0 or n % ps or node.lock_ref != held):
            return -1
        return n

    def _node_problem(self, node: TreeNode) -> str | None:
        """The first rule `node` breaks, or None (no closure or exception on the happy path)."""
        if node.value is None:
            return "evicted node is reachable"
        n, ps = len(node.key.token_ids), self.page_size
        if len(node.value) != n:
            return f"{len(node.value)} slot ids for a key of {n} tokens"
        if node is not self.root_node:
            if n == 0 or n % ps:
                return f"key length {n} is not a positive multiple of page {ps}"
            expected = node.locks_held + sum(c.lock_ref for c in node.children.values())
            if node.lock_ref != expected:
                return f"lock_ref {node.lock_ref} != locks held here and below ({expected})"
        for ck, child in node.children.items():
            if child.parent is not node:
                return f"child {child.id} does not point back to its parent"
            if child.key.child_key(ps) != ck:
                return f"child {child.id} is filed under {ck!r}, its key says otherwise"
        return None

    def _check_totals(self, reachable, leaves, evictable: int, protected: int) -> None:
        if reachable.keys() != self._nodes.keys():
            extra = sorted(self._nodes.keys() - reachable.keys())[:5]
            raise InvariantError(f"registered nodes not reachable from the root: {extra}")
        if (evictable, protected) != (self.evictable_size_, self.protected_size_):
            raise InvariantError(
                f"evictable/protected sizes are {self.evictable_size_}/{self.protected_size_}, "
                f"the tree holds {evictable}/{protected}"
            )
        if leaves != self._leaves.leaves:
            wrong = sorted(n.id for n in leaves ^ self._leaves.leaves)[:5]
            raise InvariantError(f"evictable leaf set is wrong for nodes {wrong}")
        problem = self._leaves.check()
        if problem:
            raise InvariantError(problem)

    # -------------------------------------------------------------------------------- helpers

    def _aligned(self, key: RadixKey) -> int:
        n = len(key)
        return n if self.page_size == 1 else n // self.page_size * self.page_size

    @staticmethod
    def _as_key(key) -> RadixKey:
        """A RadixKey is trusted as SGLang trusts its callers; a plain sequence is checked once
        (ints only, in C) since it comes straight from a user."""
        if isinstance(key, RadixKey):
            return key
        if isinstance(key, str | bytes) or not isinstance(key, Sequence | range):
            raise TypeError(f"expected a RadixKey or a sequence of token ids, "
                            f"got {type(key).__name__}")
        ids = list(key)
        try:
            array("q", ids)
        except (TypeError, OverflowError):
            raise TypeError("token ids must be ints that fit in 64 bits") from None
        return RadixKey(ids)

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


def _concat_tokens(parts: list) -> Sequence[int]:
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
