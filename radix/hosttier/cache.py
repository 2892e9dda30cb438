"""HostTierCache: SGLang 0.5.23's UnifiedRadixCache with HiCache on (a device and a host tier).

Follows unified_radix_cache.py and unified_cache/unified_tree_core.py with the FULL component
only (a standard full-attention model) and `--hicache-host-memory-mode cache`. This file holds
the tree: match (walking device and host-only nodes), insert (restoring host-only nodes from
the request's fresh slots, counting hits, write-through backups) and splits, on radix/tree's
own key, node, walk and split (one tree: a HostNode is a TreeNode with a host copy). Locks and
`check_invariants` are in locks.py; the moves between tiers (evict, demote, backup, load back,
host eviction) in moves.py.

    device only ──backup──> both ──demote (device eviction)──> host only ──host eviction──> gone
         ^                    ^                                    │
         └─ evict (no copy)   └──── load back / insert restores ───┘

Deliberate differences: transfers are synchronous (SGLang acks a write or a load on a later
scheduler step; here each call ends with its acks applied, which is what SGLang reaches after
`writing_check` / `loading_check`); time is an injected clock (one read per node an insert
walks, one per match for the path, as SGLang's counter); heap ties go to the older node id.
Leaves out: SWA/Mamba components, storage prefetch, sessions, buffer_only mode, the kv-event
publisher (the tier events are emitted to the sink instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from radix import events as ev
from radix.hosttier.capacity import (
    LOAD_BACK_THRESHOLD,
    HostPool,
    check_policy,
    write_through_threshold,
)
from radix.hosttier.locks import TierLocks
from radix.hosttier.moves import TierMoves
from radix.hosttier.node import HostInsert, HostMatch, HostNode
from radix.request import SlotAllocator
from radix.tokens import tokens
from radix.tree.evict_policy import get_strategy, tlru_new_node, tlru_split
from radix.tree.key import RadixKey, as_key, child_key_at
from radix.tree.node import ROOT_PRIORITY, attach, split_edge
from radix.tree.radix_cache import LogicalClock
from radix.tree.results import concat_values
from radix.tree.unified import split_times
from radix.tree.walk import EdgeMatcher, walk


class HostTierCache(TierLocks, TierMoves):
    """A radix tree over a device pool (`allocator`) and a host pool of `host_tokens`.

    Write-through, nothing cached: one insert of 4 tokens backs them up at once (threshold 1).
    >>> c = HostTierCache(SlotAllocator(8), host_tokens=16)
    >>> leaf = c.insert([1, 2, 3, 4], c.allocator.alloc(4)).last_node
    >>> leaf.tier, c.host.num_used, c.counts().backed_up
    ('both', 4, 4)
    """

    def __init__(self, allocator: SlotAllocator, host_tokens: int,
                 write_policy: str = "write_through", page_size: int = 1,
                 eviction_policy: str = "lru", policy_config: Mapping[str, Any] | None = None,
                 clock: Callable[[], float] | None = None, sink: ev.EventSink | None = None,
                 load_back_threshold: int = LOAD_BACK_THRESHOLD) -> None:
        self.write_policy = check_policy(write_policy)
        self.is_write_back = write_policy == "write_back"
        self.write_through_threshold = write_through_threshold(write_policy)
        self.load_back_threshold = load_back_threshold
        if getattr(allocator, "page_size", 1) != page_size:
            raise ValueError(f"the allocator's page size {allocator.page_size} is not "
                             f"page_size {page_size}")
        self.allocator, self.page_size = allocator, page_size
        self.host = HostPool(host_tokens)
        self.eviction_policy = eviction_policy.lower()
        self.sort_key = get_strategy(self.eviction_policy, policy_config)
        self._tlru = self.eviction_policy == "tlru"
        self.clock = clock if clock is not None else LogicalClock()
        self._sink = sink
        self._edges = EdgeMatcher(page_size)  # the tree's edge compare (radix/tree/walk.py)
        self.root_node = HostNode(0, RadixKey([]), [], 0.0, ROOT_PRIORITY)
        self.root_node.lock_ref = 1
        self._nodes: dict[int, HostNode] = {0: self.root_node}
        self._next_id = 1
        self._next_anchor = 1
        self.device_leaves: set[HostNode] = set()  # SGLang's evictable_device_leaves
        self.host_leaves: set[HostNode] = set()  # evictable_host_leaves
        self.duplicates: dict[int, HostNode] = {}  # full_host_duplicates (write-back reclaim)
        self.evictable_size_ = self.protected_size_ = 0
        self._counts = dict.fromkeys(("backed_up", "demoted", "loaded_back", "host_evicted",
                                      "reclaimed", "dropped_unbacked",
                                      "dropped_host_pressure"), 0)

    # ------------------------------------------------------------------------------- match

    def match_prefix(self, key: RadixKey | Sequence[int]) -> HostMatch:
        """The longest cached prefix on either tier (page-aligned), splitting the node it ends
        inside. Device slots come first; host_hit_length counts the host-only tokens below.

        >>> c = HostTierCache(SlotAllocator(8), 16); _ = c.insert([1, 2, 3, 4], [1, 2, 3, 4])
        >>> m = c.match_prefix([1, 2, 9]); m.device_prefix_len, len(c.root_node.children)
        (2, 1)
        """
        # the tree's walk; its times are stamped again below, after the walk, as SGLang's
        # HiCache match does (the walk's splits read the clock first)
        path = walk(self.root_node, as_key(key), self._edges, 0.0, self._split)[0]
        values = []
        best = best_dev = self.root_node
        for best in path:
            if best.value is not None:
                values.append(best.value)
                best_dev = best
        x, host_hit = best, 0
        while x is not best_dev and x is not self.root_node:  # the host-only nodes below
            host_hit += len(x.host_value) if x.host_value is not None else 0
            x = x.parent
        t, x = self.clock(), best
        while x is not None:  # SGLang: best_match_node and every ancestor, after the walk
            x.last_access_time = t
            x = x.parent
        dev_len = sum(len(v) for v in values)
        return HostMatch(concat_values(values), dev_len, host_hit, best_dev, best)

    # ------------------------------------------------------------------------------ insert

    def insert(self, key: RadixKey | Sequence[int], value: Sequence[int] | None = None,
               priority: int = 0, *, inserted_len: int = 0, prev_prefix_len: int = 0
               ) -> HostInsert:
        """Caches key with device slots `value`. A walked host-only node takes the key's own
        slots back (adopted); other overlapping slots from `prev_prefix_len` on are duplicates
        and freed. Nodes ending past `inserted_len` count a hit, and under write-through a node
        reaching the threshold is backed up with its unbacked ancestors."""
        key = as_key(key)
        tok, ps, ns = key.token_ids, self.page_size, key.namespace
        n = len(tok) - len(tok) % ps
        value = list(tok[:n]) if value is None else list(value[:n])
        root = self.root_node
        root.last_access_time = self.clock()
        root.priority = max(root.priority, priority)
        node, pos, adopted = root, 0, 0
        shared = self._edges.shared_len
        while pos < n:  # the tree's walk, one hop at a time: each hop's moves come in between
            child = node.children.get(child_key_at(tok, pos, ps, ns))
            if child is None:
                break
            child.last_access_time = self.clock()
            m = shared(tok, pos, n, child)
            if m < len(child.key):
                child = self._split(child, m)
            child.priority = max(child.priority, priority)
            if child.value is None:
                self._unevict(child, value[pos:pos + m])
                adopted += m
            else:
                dup = max(0, prev_prefix_len - pos)
                if dup < m:
                    self.allocator.free(value[pos + dup:pos + m])
            node, pos = child, pos + m
            if pos > inserted_len and self._hit_and_check(child):
                self._backup_chain(child)
        prefix_len, target = pos, node
        if pos < n:
            target = self._add_leaf(node, key[pos:n], value[pos:n], priority)
            if not self.is_write_back and n > inserted_len and self._hit_and_check(target):
                self._backup_chain(target)
        return HostInsert(prefix_len, target, adopted)

    def _hit_and_check(self, node: HostNode) -> bool:
        """SGLang's _inc_hit_count_and_check: under write-back no hit is counted at all."""
        if node.value is None or self.is_write_back:
            return False
        node.hit_count += 1
        return node.host_value is None and node.hit_count >= self.write_through_threshold

    def _unevict(self, node: HostNode, fresh: list[int]) -> None:
        node.value = fresh
        if node.lock_ref > 0:
            self.protected_size_ += len(fresh)
        else:
            self.evictable_size_ += len(fresh)
        self._refresh(node)
        self._track_duplicate(node)
        self._refresh(node.parent)
        self._emit(ev.DeviceRestored(node.id, len(fresh), tuple(fresh)))

    def _add_leaf(self, parent: HostNode, key: RadixKey, value: list[int],
                  priority: int) -> HostNode:
        t = self.clock()
        leaf = HostNode(self._next_id, key, value, t, priority)
        self._next_id += 1
        attach(parent, leaf, self.page_size)
        if self._tlru:
            tlru_new_node(leaf, parent)
        self._nodes[leaf.id] = leaf
        self.evictable_size_ += len(value)
        self._emit(ev.NodeInserted(leaf.id, parent.id, tokens(key.token_ids), tokens(value),
                                   priority, t, key.extra_key, key.cache_salt))
        self._refresh(leaf)
        self._refresh(parent)
        return leaf

    def _split(self, child: HostNode, m: int, t: float = 0.0) -> HostNode:
        """Cuts child after m tokens (the tree's split_edge: the first m device slots, the
        locks, hit count and priority); the new upper node also takes the first m host slots,
        the host lock count and the host lock's segment end; the unified flavor's times
        (`split_times`). `t`, a walk's time, is not read: the new node reads the clock."""
        created = self.clock()
        new = split_edge(child, self._next_id, m, created, self.page_size)
        self._next_id += 1
        new.host_lock_ref = child.host_lock_ref
        new.host_anchor, child.host_anchor = child.host_anchor, 0
        if child.host_value is not None:
            new.host_value, child.host_value = child.host_value[:m], child.host_value[m:]
        parent = new.parent
        if self._tlru:
            tlru_split(new, child, m)
        self._nodes[new.id] = new
        split_times(self, new, child)
        self._emit(ev.NodeSplit(child.id, new.id, parent.id, m, created, new.creation_time))
        self._refresh(new)
        self._refresh(child)
        self._track_duplicate(new)
        return new

    # ------------------------------------------------------------------------------ helpers

    def _refresh(self, node: HostNode) -> None:
        """SGLang's _update_evictable_leaf_sets: a D-leaf has device KV, no device child and
        no lock; an H-leaf is host-only, childless and unlocked on both tiers."""
        if node is self.root_node:
            return
        if (node.value is not None and node.lock_ref == 0
                and not any(c.value is not None for c in node.children.values())):
            self.device_leaves.add(node)
        else:
            self.device_leaves.discard(node)
        if (node.value is None and node.host_value is not None and not node.children
                and node.lock_ref == 0 and node.host_lock_ref == 0):
            self.host_leaves.add(node)
        else:
            self.host_leaves.discard(node)

    def _emit(self, event: ev.Event) -> None:
        if self._sink is not None:
            self._sink.emit(event)

