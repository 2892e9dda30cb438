"""UnifiedRadixCache: SGLang 0.5.23's one tree for FULL, SWA and MAMBA components
(mem_cache/unified_radix_cache.py over unified_cache/unified_tree_core.py), on our key, node and
edge links (radix/tree/radix_cache.py) with the components in radix/tree/components/.

Each node keeps FULL's slots as its `value` (the path: a leaf lives on FULL alone) and one
`ComponentData` per auxiliary component, whose value is None for a tombstone. Read top to bottom:

    match_prefix   walks FULL's path; the hit is the deepest node every validator accepts
    insert         walks and splits; components take overlapping slots (SWA recovers a
                   tombstone inside the insert's window), then commit on the last node
    evict          per component: FULL pops leaves, SWA and MAMBA walk their LRUs, tombstoning
                   inside nodes and cascading to lower priorities (unified_evict.py)
    inc/dec_lock_ref   each component's own walk, with a receipt; dec_swa_lock_only
    checkpoint / release_kv_cache   a request's KV in, its component state donated or freed

Deliberate differences (tools/diff_sglang_hybrid.py checks the rest against SGLang's own code):
one clock read per walk (SGLang reads a counter per node: the same order for every leaf); frees
apply at once, in SGLang's order (it defers them to step barriers); node ids are the cache's.
Leaves out: HiCache, sessions, EAGLE bigram keys, the rotation base, storage and linkers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from radix import events as ev
from radix.request import Req
from radix.tokens import TokenRuns, tokens
from radix.tokens.runs import PrefixProbe, gallop_match
from radix.tree import unified_caching, unified_check, unified_evict
from radix.tree.components.base import (
    FULL,
    MAMBA,
    SWA,
    ComponentData,
    ComponentType,
    LockReceipt,
    TreeComponent,
    parse_component,
)
from radix.tree.components.full import FullComponent
from radix.tree.components.mamba import MambaComponent
from radix.tree.components.req_state import ReqKvInfo
from radix.tree.components.swa import SWAComponent
from radix.tree.components.swa_cap import add_capped_leaf
from radix.tree.evict_policy import EvictionHeap, get_strategy, tlru_new_node, tlru_split
from radix.tree.key import RadixKey, page_at
from radix.tree.node import ROOT_PRIORITY, TreeNode, attach
from radix.tree.radix_cache import LogicalClock
from radix.tree.unified_types import EvictResult, HybridMatchResult, InsertParams, InsertResult
from radix.tree.walk import GUARD_MIN_LEN


class UnifiedTreeNode(TreeNode):
    """A TreeNode with one ComponentData per auxiliary component, indexed by ComponentType
    (SGLang's `component_data`); FULL's are the node's own `value` and `lock_ref`."""

    __slots__ = ("component_data",)


COMPONENT_CLASSES = {FULL: FullComponent, SWA: SWAComponent, MAMBA: MambaComponent}


class UnifiedRadixCache(ev.StepEmitter):
    """SGLang 0.5.23's UnifiedRadixCache over integer slot ids.

    With FULL alone it is our RadixCache (flavor "unified"); with SWA, a node beyond a window
    of SWA data is a tombstone the match cannot end on; with MAMBA, the match ends only on a
    node that keeps a state.

    >>> c = UnifiedRadixCache((FULL, MAMBA))
    >>> _ = c.insert(InsertParams(RadixKey([1, 2, 3, 4]), mamba_value=[7]))
    >>> c.match_prefix([1, 2, 3, 4, 5]).prefix_len, c.match_prefix([1, 2, 9]).prefix_len
    (4, 0)
    """

    def __init__(
        self,
        tree_components: Iterable[ComponentType] = (FULL,),
        page_size: int = 1,
        eviction_policy: str = "lru",
        policy_config: Mapping[str, Any] | None = None,
        sliding_window_size: int | None = None,
        mamba_chunk_size: int = 64,
        mamba_max_states_per_path: int = -1,
        enable_mamba_extra_buffer: bool = True,
        clock: Callable[[], float] | None = None,
        sink: ev.EventSink | None = None,
        allocator: Any = None,
        mamba_pool: Any = None,
        disable: bool = False,
    ) -> None:
        types = tuple(parse_component(t) for t in tree_components)
        if not types or types[0] != FULL or len(set(types)) != len(types):
            raise ValueError(f"tree_components must start with FULL, each once, got {types}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.tree_components, self.page_size, self.disable = types, page_size, disable
        self.eviction_policy = eviction_policy.lower()
        self.sort_key = get_strategy(self.eviction_policy, policy_config)
        self._tlru = self.eviction_policy == "tlru"
        self.clock = clock if clock is not None else LogicalClock()
        self._sink = sink
        self.allocator, self.mamba_pool = allocator, mamba_pool
        self.sliding_window_size = sliding_window_size
        self.mamba_chunk_size = mamba_chunk_size  # the model's (SGLang's FLA chunk: 64)
        self.mamba_max_states_per_path = mamba_max_states_per_path
        self.enable_mamba_extra_buffer = enable_mamba_extra_buffer and MAMBA in types
        self.is_swa_enabled, self.is_mamba_enabled = SWA in types, MAMBA in types
        self.components: dict[ComponentType, TreeComponent] = {
            t: COMPONENT_CLASSES[t](self) for t in types}
        self.comps = tuple(self.components.values())
        self.aux = self.comps[1:]
        self._aux_types = tuple(int(c.component_type) for c in self.aux)
        self.full: FullComponent = self.components[FULL]
        self._slots = max(types) + 1  # length of a node's component_data list
        self._acquires = tuple(c.acquire for c in self.comps)  # (bound once)
        self._releases = tuple(c.release for c in reversed(self.comps))  # auxiliary first
        self._hooks = _Hooks(self.comps)
        # a deleted leaf's FULL slots and SWA peers go back in one free (the allocator's)
        self._frees_swa_peers = self.is_swa_enabled and allocator is not None
        # SWA: a new leaf longer than a window is made as the two nodes its cap splits it into
        self._add_capped_leaf = partial(add_capped_leaf, self.components[SWA]) \
            if SWA in self.components and self.eviction_policy != "tlru" else None
        self._probe = PrefixProbe()  # compares long first edges without slicing the key
        self.num_steps = 0
        self.req_states: dict[Req, ReqKvInfo] = {}
        self.reset()

    def reset(self) -> None:
        """Empties the tree (cached slots are not freed: the caller owns the pools)."""
        self._next_id = 1
        self.root_node = self._new_node(0, RadixKey([]), [], 0.0)
        self.root_node.lock_ref = 1
        self.root_node.priority = ROOT_PRIORITY
        for comp in self.aux:
            comp.data(self.root_node).lock_ref = 1
            comp.lru.__init__()
        self._nodes = {0: self.root_node}
        self._leaves = EvictionHeap(self.sort_key)
        self.evictable_size_ = dict.fromkeys(self.tree_components, 0)
        self.protected_size_ = dict.fromkeys(self.tree_components, 0)
        self.req_states.clear()
        self._emit(ev.CacheReset())

    def _new_node(self, node_id: int, key: RadixKey, value, time: float) -> UnifiedTreeNode:
        node = UnifiedTreeNode(node_id, key, value, time)
        data: list = [None] * self._slots
        for comp in self.aux:
            data[comp.component_type] = ComponentData(node)
        node.component_data = data
        return node

    def kv_of(self, req: Req) -> ReqKvInfo:
        """The request's component state (made on first use)."""
        state = self.req_states.get(req)
        if state is None:
            state = self.req_states[req] = ReqKvInfo()
        return state

    # ---------------------------------------------------------------------------------- match

    def match_prefix(self, key: RadixKey | Sequence[int], rid: str | None = None) -> \
            HybridMatchResult:
        """The longest page-aligned prefix of `key` whose last node every component accepts:
        FULL (always), SWA (a full window of SWA data behind it, or none missing from the
        root), MAMBA (a state on the node). Splits the node the walk ends inside; touches the
        hit and its ancestors only; sets the branching seqlens.

        >>> c = UnifiedRadixCache((FULL, MAMBA), mamba_chunk_size=2)
        >>> _ = c.insert(InsertParams(RadixKey([1, 2, 3, 4, 5, 6]), mamba_value=[9]))
        >>> r = c.match_prefix([1, 2, 3, 4, 5, 7]); r.prefix_len, r.full_kv_hit_length
        (0, 5)
        >>> r.mamba_branching_seqlen  # keep a state at 4 (the grid of 2 below 5): next one hits
        4
        """
        if key.__class__ is not RadixKey:
            key = _as_key(key)
        sink = self._sink
        if sink is not None:
            sink.emit(ev.StepStarted(self.num_steps, "match_prefix", rid))
        result = self._match(key)
        if sink is not None:
            sink.emit(ev.StepEnded(self.num_steps, "match_prefix"))
        self.num_steps += 1
        return result

    def _match(self, key: RadixKey) -> HybridMatchResult:
        tok, ps = key.token_ids, self.page_size
        n = len(tok) - len(tok) % ps
        if self.disable or n == 0:
            return HybridMatchResult([], self.root_node, 0, 0)
        validators = [c.validator() for c in self.aux]
        ns = key.namespace
        node = best = self.root_node
        values: list = []
        best_count = best_len = pos = 0
        while pos < n:
            first = tok[pos] if ps == 1 else tuple(tok[pos: pos + ps])
            child = node.children.get(first if ns is None else (ns, first))
            if child is None:
                break
            m = self._edge_match(child, tok, pos, n)
            cut = m < len(child.value)  # (a live node's value is as long as its key)
            if cut:
                child = self._split_node(child, m)
            values.append(child.value)
            node, pos = child, pos + m
            ok = True
            for v in validators:  # every validator sees every node
                if not v(node):
                    ok = False
            if ok:
                best, best_count, best_len = node, len(values), pos
            if cut:
                break
        if best_count < len(values):
            del values[best_count:]
        return self._match_post(key, best, values, best_len, pos)

    def _match_post(self, key, best, values, prefix_len: int, full_hit: int) -> \
            HybridMatchResult:
        for refresh in self._hooks.refresh_match_end:
            refresh(best)
        t = self.clock()
        x = best
        while x is not None:
            x.last_access_time = t
            x = x.parent
        self._leaves.touch(best)
        result = HybridMatchResult(values, best, prefix_len, full_hit)
        for finalize in self._hooks.finalize_match:
            result = finalize(result)
        if self._sink is not None:
            path, x = [], best
            while x is not self.root_node:
                path.append(x.id)
                x = x.parent
            self._emit(ev.HybridPrefixMatched(tuple(reversed(path)), len(key), result.prefix_len,
                                              full_hit, result.mamba_branching_seqlen,
                                              result.swa_branching_seqlen))
        return result

    def _edge_match(self, child, tok, pos: int, n: int) -> int:
        """Tokens of child's edge that tok[pos:n] matches, page-floored (at least one page: the
        child key matched). A long first edge (a shared system prompt, compared on every
        request) is compared in place, without slicing the key (RadixCache's PrefixProbe)."""
        edge = child.key.token_ids
        m = len(edge)
        if n - pos >= m:
            if pos or m < GUARD_MIN_LEN or tok.__class__ is not list \
                    or edge.__class__ is not list:
                if tok[pos: pos + m] == edge:
                    return m
            elif len(tok) == m:
                if tok == edge:
                    return m
            else:
                guarded = child.guarded_key
                if guarded is None:
                    guarded = child.guarded_key = self._probe.guard(edge)
                if self._probe.starts_with(tok, guarded):
                    return m
        m = gallop_match(edge, tok[pos:n])
        return m - m % self.page_size

    # --------------------------------------------------------------------------------- insert

    def insert(self, params: InsertParams | RadixKey | Sequence[int], rid: str | None = None) \
            -> InsertResult:
        """Caches params.key with FULL slots params.value (and params.mamba_value at its end).
        Walks the cached part (touching, raising priorities, counting hits past inserted_len),
        lets each component take the slots it overlaps (SWA: a tombstone inside the window is
        recovered from the request's slots), frees the duplicates past prev_prefix_len, grows
        one leaf, then each component commits on the last node.

        >>> c = UnifiedRadixCache((FULL, MAMBA))
        >>> r = c.insert(InsertParams(RadixKey([1, 2, 3]), mamba_value=[5]))
        >>> r.prefix_len, r.mamba_exist, c.insert(InsertParams(RadixKey([1, 2, 3]),
        ...                                                     mamba_value=[6])).mamba_exist
        (0, False, True)
        """
        if not isinstance(params, InsertParams):
            params = InsertParams(_as_key(params))
        self._begin("insert", rid)
        result = self._insert(params)
        self._end("insert")
        return result

    def _insert(self, params: InsertParams) -> InsertResult:
        key, ps = params.key, self.page_size
        tok = key.token_ids
        n = len(tok) - len(tok) % ps
        value = params.value
        if value is None:
            value = tok
        elif len(value) < n:
            raise ValueError(f"value has {len(value)} slot ids for a key of {n} tokens")
        root, t = self.root_node, self.clock()
        root.last_access_time = t
        priority, inserted_len = params.priority, params.inserted_len
        if root.priority < priority:
            root.priority = priority
        result = InsertResult(0, root)
        if self.disable or n == 0:
            result.mamba_exist = True
            return result
        overlaps = self._hooks.insert_overlap
        ns = key.namespace
        node, pos, path, first = root, 0, [], None
        while pos < n:
            head_ = tok[pos] if ps == 1 else tuple(tok[pos: pos + ps])
            child = node.children.get(head_ if ns is None else (ns, head_))
            if child is None:
                break
            child.last_access_time = t
            m = self._edge_match(child, tok, pos, n)
            if m < len(child.value):
                child = self._split_node(child, m)
            if child.priority < priority:
                child.priority = priority
            # the components take what they overlap; the request's duplicates past
            # prev_prefix_len are freed (FULL only below its SWA eviction cursor)
            consumed = m
            for overlap in overlaps:
                consumed = min(consumed, overlap(child, m, pos, value, params, result))
            dup_start = params.prev_prefix_len - pos
            if dup_start < 0:
                dup_start = 0
            if dup_start < consumed:
                self._free_duplicates(value[pos + dup_start: pos + consumed],
                                      params.swa_evicted_seqlen - (pos + dup_start))
            if pos + m > inserted_len:
                child.hit_count += 1
                if first is None:
                    first = len(path)
            path.append(child)
            node, pos = child, pos + m
        return self._commit(node, pos, n, key, value, params, result, path, first)

    def _free_duplicates(self, dup, swa_gone: int) -> None:
        """The request's own slots for tokens the tree already had: the first `swa_gone` lost
        their SWA peers already (full side only), the rest go back whole."""
        gone = min(max(swa_gone, 0), len(dup))
        if gone:
            self.free_full_only(dup[:gone])
        if gone < len(dup):
            self.free_kv(dup[gone:])

    def _commit(self, node, pos: int, n: int, key, value, params, result, path: list,
                first: int | None) -> InsertResult:
        is_new = pos < n
        if is_new:
            capped = self._add_capped_leaf
            leaf = None if capped is None else capped(node, key, value, pos, n, params)
            if leaf is None:
                edge = key if pos == 0 and n == len(key) else key[pos:n]
                leaf = self._add_leaf(node, edge, value[pos:n], params.priority)
            node = leaf
        result.prefix_len, result.last_node = pos, node
        for commit in self._hooks.commit_insert:
            commit(node, is_new, params, result)
        if node is not self.root_node:
            for refresh in self._hooks.refresh_insert_end:
                refresh(node)
        if is_new and pos + len(node.value) > params.inserted_len:
            node.hit_count += 1  # (SGLang measures the leaf after commit's SWA window cap)
            first = len(path) if first is None else first
        self._leaves.touch(node)
        if self._sink is not None:
            ids = tuple(x.id for x in path) + ((node.id,) if is_new else ())
            self._emit(ev.HitCounted(ids, params.priority, first is not None, first or 0))
        return result

    def _add_leaf(self, parent, key: RadixKey, value, priority: int) -> UnifiedTreeNode:
        t = self.clock()
        leaf = self._new_node(self._next_id, key, value, t)
        self._next_id += 1
        leaf.priority = priority
        attach(parent, leaf, self.page_size)
        if self._tlru:
            tlru_new_node(leaf, parent)
        self._nodes[leaf.id] = leaf
        self.evictable_size_[FULL] += len(value)
        sink = self._sink
        if sink is not None:
            self._emit(ev.NodeInserted(leaf.id, parent.id, tokens(key.token_ids),
                                       tokens(leaf.value), priority, t, key.extra_key,
                                       key.cache_salt))
        # a fresh leaf is unlocked in every component: an evictable leaf; its parent is not
        leaves = self._leaves
        leaves.add(leaf)
        if sink is not None:
            sink.emit(ev.LeafSetChanged((leaf.id,), ()))
        if parent in leaves.leaves:
            self.update_leaf(parent)
        return leaf

    def split_node(self, child, split_len: int) -> UnifiedTreeNode:
        """Cuts child's edge after split_len tokens (a component's hook may ask, e.g. SWA at
        its window boundary); returns the new upper node."""
        return self._split_node(child, split_len)

    def _split_node(self, child, split_len: int) -> UnifiedTreeNode:
        created = self.clock()
        key, value, ps = child.key, child.value, self.page_size
        new = self._new_node(self._next_id, key[:split_len], value[:split_len], created)
        self._next_id += 1
        child.value = value[split_len:]
        child.guarded_key = None
        # cut_edge's links: new goes between child and its parent, taking child's slot in the
        # parent's dict and FULL's lock_ref, hit_count and priority
        parent = new.parent = child.parent
        new.lock_ref, new.hit_count, new.priority = child.lock_ref, child.hit_count, child.priority
        rest = child.key = key[split_len:]
        child.parent = new
        upper, lower = new.key.token_ids, rest.token_ids
        upper, lower = (upper[0], lower[0]) if ps == 1 else (page_at(upper, 0, ps),
                                                              page_at(lower, 0, ps))
        if key.extra_key is not None or key.cache_salt is not None:
            ns = (key.extra_key, key.cache_salt)
            upper, lower = (ns, upper), (ns, lower)
        new.children = {lower: child}
        parent.children[upper] = new
        new.creation_time = child.creation_time
        if self._tlru:
            tlru_split(new, child, split_len)
        for comp in self.aux:
            comp.on_split(new, child)
        child.last_access_time = self.clock()
        self._nodes[new.id] = new
        if self._sink is not None:
            self._emit(ev.NodeSplit(child.id, new.id, new.parent.id, split_len, created,
                                    new.creation_time if new.creation_time != created else None))
        # the leaf set stays: `new` has a child and was never listed; child keeps its children,
        # its locks and its slots, so its standing
        self._leaves.touch(child)
        return new

    # -------------------------------------------------------------------------------- evict

    def evict(self, num_tokens: int = 0, swa_num_tokens: int = 0, mamba_num: int = 0) \
            -> EvictResult:
        """Each component in turn evicts toward its own request (SGLang's evict(EvictParams)):
        FULL pops evictable leaves in policy order, SWA and MAMBA walk their LRUs from the
        tail, deleting leaves and tombstoning inside nodes, cascading to lower priorities.

        >>> c = UnifiedRadixCache((FULL, MAMBA))
        >>> _ = c.insert(InsertParams(RadixKey([1, 2]), mamba_value=[3]))
        >>> _ = c.insert(InsertParams(RadixKey([1, 2, 5]), mamba_value=[4]))
        >>> r = c.evict(mamba_num=1); r.mamba_num_evicted, r.num_tokens_evicted, c.total_size()
        (1, 0, 3)
        """
        requests = {FULL: num_tokens, SWA: swa_num_tokens, MAMBA: mamba_num}
        for n in requests.values():
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"eviction counts must be ints >= 0, got {requests}")
        self._begin("evict")
        result = unified_evict.evict_components(self, requests, None)
        self._end("evict")
        return result

    def evict_for_alloc(self, num_tokens: int = 0, swa_num_tokens: int = 0,
                        mamba_num: int = 0) -> EvictResult:
        """Evict toward availability targets (SGLang's evict_for_alloc): each component with a
        shortfall stops once its pool can serve it, collateral frees included."""
        requests = {FULL: num_tokens, SWA: swa_num_tokens, MAMBA: mamba_num}
        self._begin("evict_for_alloc")
        targets = {ct: self.available_size(ct) + n for ct, n in requests.items()
                   if n > 0 and ct in self.components}
        result = unified_evict.evict_components(self, requests, targets)
        self._end("evict_for_alloc")
        return result

    def available_size(self, ct: ComponentType) -> int:
        """What the component's pool can serve now (the full pool, the SWA pool, state slots)."""
        a = self.allocator
        if ct == MAMBA:
            return self.mamba_pool.available_size()
        if ct == SWA:
            return a.swa_available_size()
        return a.full_available_size() if self.is_swa_enabled else a.available_size()

    def update_leaf(self, node) -> None:
        """node is an evictable leaf iff it is not the root, keeps its FULL slots, has no
        child and no component holds a lock on it (SGLang's _is_device_leaf)."""
        is_leaf = not node.children and node.lock_ref == 0 and node.value is not None
        if is_leaf:
            if node is self.root_node:
                is_leaf = False
            elif self._aux_types:
                data = node.component_data
                for t in self._aux_types:
                    if data[t].lock_ref:
                        is_leaf = False
                        break
        leaves = self._leaves
        if is_leaf == (node in leaves.leaves):
            return
        if is_leaf:
            leaves.add(node)
        else:
            leaves.discard(node)
        if self._sink is not None:
            ids = (node.id,)
            self._emit(ev.LeafSetChanged(ids, ()) if is_leaf else ev.LeafSetChanged((), ids))

    # -------------------------------------------------------------------------------- locks

    def inc_lock_ref(self, node, skip: Sequence[ComponentType] = (),
                     rid: str | None = None) -> LockReceipt:
        """Each component locks its part (FULL: node to root; SWA: up to a window, stamping the
        boundary; MAMBA: the node); returns the receipt the release replays.

        >>> c = UnifiedRadixCache((FULL, SWA), sliding_window_size=2)
        >>> leaf = c.insert(InsertParams(RadixKey([1, 2, 3, 4]))).last_node
        >>> r = c.inc_lock_ref(leaf); c.protected_size_[FULL], r.swa_uuid is not None
        (4, True)
        """
        if node.__class__ is not UnifiedTreeNode or self._nodes.get(node.id) is not node:
            self._check_live(node)
        sink = self._sink
        if sink is not None:
            sink.emit(ev.StepStarted(self.num_steps, "inc_lock_ref", rid))
        skipped = tuple(skip) if skip else ()
        receipt = tuple.__new__(LockReceipt, (node.id, skipped, None))
        if not self.disable:
            if not skipped:
                for acquire in self._acquires:
                    receipt = acquire(node, receipt)
            else:
                for comp in self.comps:
                    if comp.component_type not in skipped:
                        receipt = comp.acquire(node, receipt)
            if node.lock_ref == 0 or node in self._leaves.leaves:  # (else: still no leaf)
                self.update_leaf(node)
        if sink is not None:
            sink.emit(ev.StepEnded(self.num_steps, "inc_lock_ref"))
        self.num_steps += 1
        return receipt

    def dec_lock_ref(self, node, receipt: LockReceipt, skip_swa: bool = False,
                     rid: str | None = None) -> None:
        """Replays the receipt, auxiliary components first; skip_swa after dec_swa_lock_only
        (SWA and the components below it are already released)."""
        if node.__class__ is not UnifiedTreeNode or self._nodes.get(node.id) is not node:
            self._check_live(node)
        if receipt.node_id != node.id:
            raise ValueError(f"lock receipt anchored on node {receipt.node_id} released on "
                             f"node {node.id}")
        sink = self._sink
        if sink is not None:
            sink.emit(ev.StepStarted(self.num_steps, "dec_lock_ref", rid))
        if not self.disable:
            skipped = receipt.skipped
            if not skipped and not skip_swa:
                for release in self._releases:
                    release(node, receipt)
            else:
                for comp in reversed(self.comps):
                    if skipped and comp.component_type in skipped:
                        continue
                    if skip_swa and comp.internal_priority <= SWAComponent.internal_priority:
                        continue
                    comp.release(node, receipt)
            if (node.lock_ref == 0 and not node.children) or node in self._leaves.leaves:
                self.update_leaf(node)  # (else it is no leaf, and is not listed as one)
        if sink is not None:
            sink.emit(ev.StepEnded(self.num_steps, "dec_lock_ref"))
        self.num_steps += 1

    def dec_swa_lock_only(self, node, receipt: LockReceipt, rid: str | None = None) -> None:
        """Releases the SWA window lock early (decode has moved past the window) and the
        lower-priority locks on the node (MAMBA); FULL stays locked. The final release then
        passes skip_swa=True."""
        self._check_live(node)
        swa = self.components.get(SWA)
        if swa is None or node is self.root_node or self.disable:
            return
        self._begin("dec_swa_lock_only", rid)
        swa.release_window_lock(node, receipt.swa_uuid)
        for comp in reversed(self.comps):
            if comp.component_type not in receipt.skipped and \
                    comp.internal_priority < swa.internal_priority:
                comp.release(node, receipt)
        self._end("dec_swa_lock_only")

    # ------------------------------------------------------------------------------ requests

    def checkpoint(self, req: Req, *, up_to: int) -> None:
        """SGLang's checkpoint_into_tree: req's tokens [0, up_to) into the tree as far as
        every component can key them; the lock moves to the new last node (see
        unified_caching.py)."""
        self._begin("checkpoint", req.rid)
        if not self.disable:
            unified_caching.checkpoint_into_tree(self, req, up_to)
        self._end("checkpoint")

    def release_kv_cache(self, req: Req, *, checkpoint: bool = True,
                         kv_len: int | None = None) -> None:
        """common.py's release_kv_cache: checkpoint (unless retracted or aborted), free the
        rest of the row, unlock, give back the component state the tree did not take."""
        self._begin("release_kv_cache", req.rid)
        unified_caching.release_kv_cache(self, req, checkpoint, kv_len)
        self._end("release_kv_cache")

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """The seed chapter's name: checkpoint(req, up_to=len(req.fill_ids))."""
        self.checkpoint(req, up_to=len(req.fill_ids))

    def cache_finished_req(self, req: Req, is_insert: bool = True,
                           kv_len_to_handle: int | None = None) -> None:
        """The seed chapter's name: release_kv_cache(req, checkpoint=is_insert)."""
        self.release_kv_cache(req, checkpoint=is_insert, kv_len=kv_len_to_handle)

    def swa_retain_floor(self, state: ReqKvInfo) -> int | None:
        """With SWA and Mamba, a request keeps the window behind its last tracked state (a
        match lands on that checkpoint, which needs its window of SWA)."""
        if not (self.is_mamba_enabled and self.is_swa_enabled):
            return None
        t = state.mamba_last_track_seqlen
        return None if t is None else t - self.sliding_window_size

    # --------------------------------------------------------------------------------- frees

    def free_kv(self, ids: Sequence[int]) -> None:
        """FULL slots and their SWA peers (SGLang's FreeDeviceKV: free_segment)."""
        if self.allocator is not None and len(ids):
            self.allocator.free(ids)

    def free_full_only(self, ids: Sequence[int]) -> None:
        """FULL slots whose SWA peers are freed already, or are freed apart."""
        if self.allocator is not None and len(ids):
            if self.is_swa_enabled:
                self.allocator.free_full(ids)
            else:
                self.allocator.free(ids)

    # ---------------------------------------------------------------------------------- sizes

    def evictable_size(self) -> int:
        return self.evictable_size_[FULL]

    def protected_size(self) -> int:
        return self.protected_size_[FULL]

    def total_size(self) -> int:
        return self.evictable_size_[FULL] + self.protected_size_[FULL]

    def component_evictable_size(self, ct: ComponentType) -> int:
        return self.evictable_size_[ct]

    def component_protected_size(self, ct: ComponentType) -> int:
        return self.protected_size_[ct]

    @property
    def evictable_leaves(self) -> set:
        return self._leaves.leaves

    def node(self, node_id: int) -> UnifiedTreeNode:
        return self._nodes[node_id]

    def path_values(self, node, last: int | None = None) -> list[int]:
        """FULL slots of the path from the root to `node` (SGLang's path_device_indices), or
        only its `last` ones (joining no more nodes than they take)."""
        parts, got, root = [], 0, self.root_node
        while node is not root and (last is None or got < last):
            value = node.value
            parts.append(value)
            got += len(value)
            node = node.parent
        parts.reverse()
        if last is not None and got > last:  # the shallowest node gives only its tail
            parts[0] = parts[0][got - last:]
        out: list[int] = []
        for part in parts:
            out += part
        return out

    def check_invariants(self) -> None:
        """Raises InvariantError on the first broken rule (unified_check.py)."""
        unified_check.check_invariants(self)

    def snapshot(self) -> tuple:
        """Every node as a ComponentNodeState (unified_check.py), pre-order."""
        return unified_check.component_snapshot(self)

    # -------------------------------------------------------------------------------- helpers

    def _check_live(self, node) -> None:
        if self._nodes.get(getattr(node, "id", None)) is not node:
            raise ValueError(f"{node!r} is not a live node of this tree (evicted or foreign)")



def _as_key(key) -> RadixKey:
    if isinstance(key, RadixKey):
        return key
    if isinstance(key, str | bytes) or not isinstance(key, Sequence | range):
        raise TypeError(f"expected a RadixKey or a sequence of token ids, "
                        f"got {type(key).__name__}")
    return RadixKey(tokens(key) if isinstance(key, TokenRuns) else list(key))


class _Hooks:
    """The components' hooks the tree's walks call, bound once, in component order, leaving
    out the components that keep TreeComponent's default (a no-op) for a hook."""

    NAMES = ("refresh_match_end", "finalize_match", "insert_overlap", "commit_insert",
             "refresh_insert_end")

    def __init__(self, comps: Sequence[TreeComponent]) -> None:
        for name in self.NAMES:
            default = getattr(TreeComponent, name)
            setattr(self, name, tuple(getattr(c, name) for c in comps
                                      if getattr(type(c), name) is not default))
