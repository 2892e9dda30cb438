"""SWA's window cap on a new leaf, made at once (a fast path of SGLang 0.5.23's
_maybe_split_leaf_for_swa_lock): a new leaf wholly inside the request's window and longer than
a page-aligned window is created as the two nodes the cap splits it into, both published, with
the ids, clock reads, links, sizes, LRU order and events that adding it whole, splitting it and
publishing both halves would give (SWAComponent.commit_insert's way, which the tree takes
wherever this does not apply). tests/radix/tree/test_unified_fast_paths.py drives both ways.
"""

from __future__ import annotations

from radix import events as ev
from radix.tokens import tokens
from radix.tree.components.base import FULL
from radix.tree.components.swa import SWAComponent, ceil_align


def add_capped_leaf(swa: SWAComponent, parent, key, value, pos: int, n: int, params):
    """The new leaf key[pos:n] (slots value[pos:n]) under `parent` as its two capped nodes;
    returns the lower one (the leaf), or None where the cap does not apply as one split (the
    leaf reaches below the request's SWA cursor, or is no longer than the window).

    >>> from radix.tree.unified_radix_cache import UnifiedRadixCache
    >>> c = UnifiedRadixCache(("full", "swa"), sliding_window_size=4)
    >>> leaf = c.insert(list(range(10))).last_node  # (the insert takes this path)
    >>> (leaf.id, len(leaf.key)), (leaf.parent.id, len(leaf.parent.key))
    ((1, 4), (2, 6))
    """
    cut = n - ceil_align(swa.window, swa.cache.page_size)
    if cut <= pos or params.swa_evicted_seqlen > pos:
        return None
    cache, priority = swa.cache, params.priority
    nid = cache._next_id
    t1 = cache.clock()  # (the leaf's creation: _add_leaf's read)
    leaf = cache._new_node(nid, key[cut:n], value[cut:n], t1)
    t2 = cache.clock()  # (the split's)
    upper = cache._new_node(nid + 1, key[pos:cut], value[pos:cut], t2)
    cache._next_id = nid + 2
    upper.creation_time = t1
    leaf.priority = upper.priority = priority
    _link(cache, parent, upper, leaf, key, pos, cut)
    cache._nodes[nid] = leaf
    cache._nodes[nid + 1] = upper
    cache.evictable_size_[FULL] += n - pos
    leaf.last_access_time = cache.clock()  # (the split touches the lower half)
    sink = cache._sink
    if sink is not None:
        sink.emit(ev.NodeInserted(nid, parent.id, tokens(key.token_ids[pos:n]),
                                  tokens(value[pos:n]), priority, t1, key.extra_key,
                                  key.cache_salt))
        sink.emit(ev.LeafSetChanged((nid,), ()))
    leaves = cache._leaves
    leaves.add(leaf)
    if parent in leaves.leaves:
        cache.update_leaf(parent)
    if sink is not None:
        sink.emit(ev.NodeSplit(nid, nid + 1, parent.id, cut - pos, t2, t1 if t1 != t2 else None))
    a = cache.allocator  # (publish of each half: one translate of the whole leaf)
    both = a.translate(value[pos:n]) if a is not None else list(value[pos:n])
    swa.set_value(upper, both[: cut - pos])  # older first, so the tail stays the more recent
    swa.set_value(leaf, both[cut - pos:])
    return leaf


def _link(cache, parent, upper, leaf, key, pos: int, cut: int) -> None:
    """parent -> upper -> leaf, each filed under its child key."""
    upper.parent, leaf.parent = parent, upper
    ps, tok = cache.page_size, key.token_ids
    if ps == 1 and key.extra_key is None and key.cache_salt is None:
        upper.children = {tok[cut]: leaf}
        parent.children[tok[pos]] = upper
    else:
        upper.children = {leaf.key.child_key(ps): leaf}
        parent.children[upper.key.child_key(ps)] = upper
