"""A request's KV into the tree and out of it: RadixCache's lifecycle calls (a mixin).

Follows SGLang 0.5.23's `checkpoint` (mem_cache/radix_cache.py, unified_radix_cache.py
`checkpoint_into_tree`) and `release_kv_cache` (mem_cache/common.py); the seed chapter's names
(`cache_finished_req`, `cache_unfinished_req`) run the same code, `_checkpoint` and
`_release`. `prompt_boundary_priority` is the rule that splits a finished request's output off
its prompt, which the host tier's finish follows too (radix/hosttier/requests.py). The mixin
needs the cache's tree (radix_cache.py: `_insert`, `_lock`, `_split_node`, `_free`, the hooks).
Leaves out: SGLang's mamba and SWA branches of a checkpoint, sessions.
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.request import Req
from radix.tokens import head
from radix.tree.key import RadixKey
from radix.tree.node import TreeNode, count_hits
from radix.tree.results import concat_values

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


class RequestLifecycle:
    """RadixCache's request calls, a mixin over its tree (radix_cache.py). Each public call is
    one step (`_begin` / `_end`); the work is `_checkpoint` and `_release`."""

    def checkpoint(self, req: Req, *, up_to: int) -> None:
        """SGLang 0.5.23's `checkpoint`: cache req's tokens [0, up_to) (page-floored), split at
        the prompt boundary, free the duplicates, point the row at the tree's slots and move
        the lock to the new last node. Frees nothing past the floored key (see _checkpoint).

        >>> from radix.request import SlotAllocator
        >>> from radix.tree.radix_cache import RadixCache
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

        >>> from radix.request import SlotAllocator
        >>> from radix.tree.radix_cache import RadixCache
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

        >>> from radix.request import SlotAllocator
        >>> from radix.tree.radix_cache import RadixCache
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
        ids = head(req.all_ids, up_to)  # the whole row, shared, when it is all computed
        n = self._aligned(ids)
        key = RadixKey(head(ids, n), req.extra_key, req.cache_salt)
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
