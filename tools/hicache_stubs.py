"""SGLang 0.5.23's UnifiedRadixCache with HiCache on, on CPU, for tools/diff_sglang_hicache.py
(not a test).

Stubbed: only the transfers and pools that need a GPU or pinned memory. `Controller` stands for
HybridCacheController: `write` takes host slots (None when the host pool is short), `load` takes
device slots from the device allocator, and each appends its ack at once (a finished event
whose synchronize() does nothing). `HostGroup` stands for the host pool group (frees host slots).
`SGSide.hicache` sets what `init_hicache` sets (a host of None: HiCache off, the plain
device-only cache). Everything the tree decides is SGLang's code.
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from types import SimpleNamespace

import torch
from diff_sglang_requests import make_allocator_class

from radix.hosttier.capacity import HostPool
from radix.request import SlotAllocator


class _Done:
    def synchronize(self) -> None: ...


class Controller:
    """The transfer half of HiCacheController, synchronous."""

    def __init__(self, device, host: HostPool, policy: str) -> None:
        self.device, self.host, self.write_policy = device, host, policy
        self.ack_write_queue: list = []
        self.ack_load_queue: list = []
        self.enable_storage = False
        entry = SimpleNamespace(host_pool=SimpleNamespace(shared_allocation_domain=None),
                                host_evict_fn=None)
        self.mem_pool_host = SimpleNamespace(anchor_entry=entry,
                                             available_size=host.available_size)

    def _ack(self, queue: list, node_id) -> None:
        queue.append(SimpleNamespace(finish_event=_Done(), start_event=_Done(),
                                     node_ids=[node_id], num_tokens_by_pool=None, num_bytes=0,
                                     timing_enabled=False))

    def write(self, device_indices, node_id=None, extra_pools=None, flush=False, **_):
        slots = self.host.alloc(len(device_indices))
        if slots is None:
            return None
        self._ack(self.ack_write_queue, node_id)
        return torch.tensor(slots, dtype=torch.int64)

    def load(self, host_indices, node_id=None, extra_pools=None, **_):
        slots = self.device.alloc(len(host_indices))
        if slots is None:
            return None
        self._ack(self.ack_load_queue, node_id)
        return torch.tensor(slots, dtype=torch.int64)

    def start_writing(self) -> None: ...

    def start_loading(self) -> None: ...


class HostGroup:
    def __init__(self, host: HostPool) -> None:
        self.host = host

    def free(self, host_value, pool=None) -> None:
        self.host.free(host_value.tolist())

    def get_pool(self, name):
        return None


class SGSide:
    """One SGLang cache with HiCache, and the scheduler steps of one request at a time."""

    def __init__(self, usg, core: str, size: int, host: int | None, page: int, policy: str,
                 write: str, config: dict) -> None:
        self.usg, self.core, self.page, self.alloc_size = usg, core, page, size
        self.freed: list[int] = []
        self.alloc = make_allocator_class(usg.alloc_base)(SlotAllocator(size, page_size=page),
                                                     self.freed)
        self.host = HostPool(host or 0)
        params = usg.params.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.alloc,
            page_size=page, eviction_policy=policy, eviction_policy_config=config or None)
        self.tree = usg.UnifiedRadixCache(replace(params, tree_components=(usg.FULL,),
                                                  tree_core_backend=core))
        self.enabled = host is not None  # None: HiCache off (a device-only server)
        if self.enabled:
            self.hicache(write)
        self._moved = [0, 0, 0, 0]
        self._wrap()

    def hicache(self, write: str) -> None:
        t = self.tree
        t.cache_controller = Controller(self.alloc, self.host, write)
        t.host_pool_group = HostGroup(self.host)
        t.components[self.usg.FULL]._full_kv_pool_host = self.host
        t.host_memory_mode, t.buffer_pipeline, t.linker = "cache", None, None
        t.write_through_threshold = 1 if write == "write_through" else 2
        t.is_write_back = write == "write_back"
        t.load_back_threshold = 10
        t.tree_core.set_hicache_enabled()

    def _wrap(self) -> None:
        """Counts (demoted, loaded, host evicted, dropped) tokens at SGLang's own calls."""
        t, moved, full = self.tree, self._moved, self.usg.FULL
        demote, evict_host = t._demote, t.evict_host
        drop, leaf = t._drop_subtree_no_host, t._evict_device_leaf

        def on_demote(node_id, tracker):
            before = tracker[full]
            demote(node_id, tracker)
            moved[0] += tracker[full] - before

        def on_drop(node_id, tracker):
            before = tracker[full]
            out = drop(node_id, tracker)
            moved[3] += tracker[full] - before
            return out

        def on_leaf(node_id, tracker):
            backed, before = t.tree_core.is_backuped(node_id), tracker[full]
            out = leaf(node_id, tracker)
            moved[0 if backed else 3] += tracker[full] - before
            return out

        def on_evict_host(*a, **k):
            out = evict_host(*a, **k)
            moved[2] += out
            return out

        t._demote, t._drop_subtree_no_host = on_demote, on_drop
        t._evict_device_leaf, t.evict_host = on_leaf, on_evict_host

    def moved(self) -> tuple:
        out = tuple(self._moved)
        self._moved[:] = [0, 0, 0, 0]
        return out

    def serve(self, prompt: list, output: list, priority: int, finish: str = "release") -> tuple:
        """One request through SGLang's cache: (device hit, loaded back, miss). finish
        "release": admitted (`admit`) and finished as 0.5.23's scheduler finishes it (`release`);
        "insert": the whole sequence inserted directly (no prompt-boundary re-insert)."""
        if finish == "release":
            tokens = list(prompt) + list(output)
            req, got = self.admit(prompt, len(tokens), priority)
            if req is not None:
                self.release(req, tokens)
            return got
        u, t = self.usg, self.tree
        base, ps = u.base, self.page
        key = u.radix.RadixKey(array("q", prompt[:-1]))
        m = t.match_prefix(base.MatchPrefixParams(key=key))
        req = SimpleNamespace(last_node=m.last_device_node, rid="r", swa_host_hit_length=0,
                              mamba_host_hit_length=0, kv=SimpleNamespace(mamba_pool_idx=None))
        loaded, node = 0, m.last_device_node  # HiCache off: the scheduler loads nothing
        if self.enabled:
            loaded, node = t.init_load_back(base.InitLoadBackParams(
                best_match_node=m.best_match_node, host_hit_length=m.host_hit_length, req=req))
            t.loading_check(finish_count=len(t.cache_controller.ack_load_queue))
        prefix = t.path_device_indices(node).tolist()
        lock = t.inc_lock_ref(node).to_dec_params()
        tokens = list(prompt) + list(output)
        need = len(tokens) - len(prefix)
        short = -(-need // ps) * ps - self.alloc.available_size()
        if short > 0:
            t.evict_for_alloc(base.EvictParams(num_tokens=short))
        fresh = self.alloc.alloc(need)
        if fresh is None:
            t.dec_lock_ref(node, lock)
            return (0, 0, len(prompt))
        row = prefix + fresh
        n = len(tokens) - len(tokens) % ps
        t.insert(base.InsertParams(key=u.radix.RadixKey(array("q", tokens[:n])),
                                   value=torch.tensor(row[:n], dtype=torch.int64),
                                   priority=priority, prev_prefix_len=len(prefix)))
        if self.enabled:
            t.writing_check(finish_count=len(t.cache_controller.ack_write_queue))
        t.dec_lock_ref(node, lock)
        if n < len(row):
            self.alloc.free(torch.tensor(row[n:], dtype=torch.int64))
        hit = min(m.device_prefix_len, len(prompt))
        host = min(loaded, len(prompt) - hit)
        self._moved[1] += loaded
        return (hit, host, len(prompt) - hit - host)

    # ---- the chunked and retracting lifecycle (--lifecycle chunked) ----

    def admit(self, prompt: list, total: int, priority: int):
        """Match prompt[:-1], load back, lock (a TreeLock on req.lock), evict the shortfall,
        allocate the row to `total` tokens: (req, (device hit, loaded back, miss)); req is None
        when the device cannot hold it (nothing locked or taken)."""
        u, t = self.usg, self.tree
        base, ps = u.base, self.page
        m = t.match_prefix(base.MatchPrefixParams(key=u.radix.RadixKey(array("q", prompt[:-1]))))
        req = SimpleNamespace(last_node=m.last_device_node, rid="r", swa_host_hit_length=0,
                              mamba_host_hit_length=0, kv=SimpleNamespace(mamba_pool_idx=None))
        loaded, node = 0, m.last_device_node
        if self.enabled:
            loaded, node = t.init_load_back(base.InitLoadBackParams(
                best_match_node=m.best_match_node, host_hit_length=m.host_hit_length, req=req))
            t.loading_check(finish_count=len(t.cache_controller.ack_load_queue))
        prefix = t.path_device_indices(node).tolist()
        lock = t.lock(node)
        need = total - len(prefix)
        short = -(-need // ps) * ps - self.alloc.available_size()
        if short > 0:
            t.evict_for_alloc(base.EvictParams(num_tokens=short))
        fresh = self.alloc.alloc(need)
        self._moved[1] += loaded
        if fresh is None:
            t.unlock(lock)
            return None, (0, 0, len(prompt))
        hit = min(m.device_prefix_len, len(prompt))
        host = min(loaded, len(prompt) - hit)
        kv = SimpleNamespace(req_pool_idx=0, cache_protected_len=len(prefix),
                             cache_inserted_len=0, row=torch.tensor(prefix + fresh))
        req = _Req(prompt, priority, kv, lock, node)
        return req, (hit, host, len(prompt) - hit - host)

    def checkpoint(self, req, tokens: list, up_to: int) -> None:
        """SGLang's own UnifiedRadixCache.checkpoint(req, up_to) (cache_unfinished_req), over a
        one-row req_to_token pool that is the request's row."""
        t = self.tree
        req.full_untruncated_fill_ids = array("q", tokens)
        t.req_to_token_pool = _RowPool(req.kv.row)
        t.checkpoint(req, up_to=up_to)
        if self.enabled:
            t.writing_check(finish_count=len(t.cache_controller.ack_write_queue))

    def retract(self, req) -> None:
        """release_kv_cache(req, checkpoint=False): the row past cache_protected_len freed
        (owned and over-allocated, pages in row order), then the lock dropped."""
        row = req.kv.row
        if req.kv.cache_protected_len < len(row):
            self.alloc.free(row[req.kv.cache_protected_len:].clone())
        self.tree.unlock(req.lock)

    def finish(self, req, tokens: list) -> None:
        """The final insert as `serve` makes it (the whole sequence, from the request's
        cache_protected_len and cache_inserted_len on), unlock, free the rest of the row."""
        u, t, ps = self.usg, self.tree, self.page
        row = req.kv.row.tolist()
        n = len(tokens) - len(tokens) % ps
        t.insert(u.base.InsertParams(key=u.radix.RadixKey(array("q", tokens[:n])),
                                     value=torch.tensor(row[:n], dtype=torch.int64),
                                     priority=req.priority,
                                     prev_prefix_len=req.kv.cache_protected_len,
                                     inserted_len=req.kv.cache_inserted_len))
        if self.enabled:
            t.writing_check(finish_count=len(t.cache_controller.ack_write_queue))
        t.unlock(req.lock)
        if n < len(row):
            self.alloc.free(torch.tensor(row[n:], dtype=torch.int64))

    def release(self, req, tokens: list) -> None:
        """The finish as 0.5.23's scheduler runs it: release_kv_cache(checkpoint=True), i.e.
        SGLang's own checkpoint of a finished request (which also re-inserts the prompt alone
        with priority + 1, splitting the leaf at the prompt boundary), then the row past
        cache_protected_len freed and the lock dropped. radix/hosttier's finish_running does the
        same (docs/HOST_TIER.md)."""
        t = self.tree
        req.full_untruncated_fill_ids = array("q", tokens)
        req.finished = lambda: True
        t.req_to_token_pool = _RowPool(req.kv.row)
        t.checkpoint(req, up_to=len(tokens))
        if self.enabled:
            t.writing_check(finish_count=len(t.cache_controller.ack_write_queue))
        row = req.kv.row
        if req.kv.cache_protected_len < len(row):
            self.alloc.free(row[req.kv.cache_protected_len:].clone())
        t.unlock(req.lock)

    def sizes(self) -> tuple:
        t = self.tree
        return (t.evictable_size(), t.protected_size(), self.alloc.available_size(),
                self.host.available_size())


class _RowPool:
    """A req_to_token pool of one row: the request's (checkpoint reads and rewrites it)."""

    def __init__(self, row) -> None:
        self.req_to_token = row.unsqueeze(0)

    def write(self, where, values) -> None:
        self.req_to_token[where] = values


class _Req:
    """The Req fields UnifiedRadixCache.checkpoint reads on a FULL-only cache."""

    def __init__(self, prompt: list, priority: int, kv, lock, node) -> None:
        self.origin_input_ids, self.priority, self.kv = array("q", prompt), priority, kv
        self.lock, self.last_node, self.rid = lock, node, "r"
        self.extra_key = self.cache_salt = self.session_id = self.kv_rotation_base = None
        self.session = self.finished_reason = None
        self.full_untruncated_fill_ids: list = []

    def finished(self) -> bool:
        return False


def sg_shape(side: SGSide, rich: bool) -> tuple:
    """The tree as diff_sglang_hicache.our_shape builds ours (Python core: its nodes)."""
    full = side.usg.FULL
    if side.core != "python":
        return rust_shape(side, rich)

    def walk(node, root: bool) -> tuple:
        cd = node.component_data[full]
        slots = () if root or cd.value is None else tuple(cd.value.tolist())
        host = None if root or cd.host_value is None else len(cd.host_value)
        kids = tuple(sorted((walk(c, False) for c in node.children.values()), key=repr))
        head = (slots, host, None if root else cd.lock_ref, None if root else cd.host_lock_ref)
        return head + ((node.hit_count, node.priority) if rich and not root else ()) + (kids,)

    return walk(side.tree.tree_core.root_node, True)


def rust_shape(side: SGSide, rich: bool) -> tuple:
    """The Rust core's tree from its pretty_print (ids, depth, locks) and per-node readers
    (device slots, backed up or not). Its host lock refs and host slot counts are not exposed:
    host residency is compared as a flag, as our_shape(rust=True) builds it."""
    from diff_sglang_unified import rust_tree  # noqa: PLC0415

    t, full = side.tree.tree_core, side.usg.FULL
    rows = rust_tree(side.tree)

    def build_at(i: int) -> tuple[tuple, int]:
        depth, node_id, lock = rows[i]
        value = t.get_component_device_value(node_id, full) if i else None
        slots = () if value is None else tuple(value.tolist())
        host = None if i == 0 else t.is_backuped(node_id)
        kids, j = [], i + 1
        while j < len(rows) and rows[j][0] > depth:
            kid, j = build_at(j)
            kids.append(kid)
        return (slots, host, lock if i else None, None, tuple(sorted(kids, key=repr))), j

    return build_at(0)[0]
