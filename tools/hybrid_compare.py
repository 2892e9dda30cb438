"""What tools/diff_sglang_hybrid.py compares after every op, SGLang's side against ours (not a
test): slots freed per pool (exact ids, in order), sizes per component, free slots per pool, the
whole tree per component and each running request's row and component state. Leaves out: the
Rust core's SWA and Mamba lock refs (its binding does not expose them; the per-component
protected sizes stand in for them).
"""

from __future__ import annotations

import torch
from diff_sglang_unified import rust_tree

from radix.tree.components.base import FULL, MAMBA, SWA

NAMES = {FULL: "full", SWA: "swa", MAMBA: "mamba"}


def compare_pair(p, where: str) -> None:
    _frees(p, where)
    _sizes(p, where)
    _tree(p, where)
    _requests(p, where)
    p.ours.check_invariants()


def _frees(p, where: str) -> None:
    for pool in ("full", "swa", "mamba"):
        sg, ours = p.sg_freed[pool], p.our_freed[pool]
        assert sg == ours, f"{where}: {pool} slots freed\n  SGLang {sg}\n  ours   {ours}"
        sg.clear()
        ours.clear()


def _sizes(p, where: str) -> None:
    core, ours = p.sg.tree.tree_core, p.ours
    for ct in ours.tree_components:
        sgct = _sg_ct(ct)
        got = (core.component_evictable_size(sgct), core.component_protected_size(sgct))
        want = (ours.evictable_size_[ct], ours.protected_size_[ct])
        assert got == want, f"{where}: {NAMES[ct]} evictable/protected {got} != {want}"
    a, oa = p.sg.pools.allocator, ours.allocator
    if ours.is_swa_enabled:
        got = (a.full_available_size(), a.swa_available_size())
        want = (oa.full_available_size(), oa.swa_available_size())
    else:
        got, want = a.available_size(), oa.available_size()
    assert got == want, f"{where}: free KV slots {got} != {want}"
    if ours.is_mamba_enabled:
        got = p.sg.pools.req_to_token_pool.mamba_allocator.available_size()
        assert got == ours.mamba_pool.available_size(), f"{where}: free Mamba slots"


def _tree(p, where: str) -> None:
    comps = p.ours.tree_components
    if p.k.core == "rust":
        sg = _rust_shape(p.sg.tree, comps)
        ours = _our_shape(p.ours.root_node, comps, rich=False)
    else:
        sg = _py_shape(p.sg.tree.tree_core.root_node, comps)
        ours = _our_shape(p.ours.root_node, comps, rich=True)
    assert sg == ours, f"{where}: trees differ\n  SGLang {sg}\n  ours   {ours}"


def _vals(v) -> tuple | None:
    return None if v is None else tuple(v.tolist() if isinstance(v, torch.Tensor) else v)


def _rust_shape(tree, comps) -> tuple:
    rows, core = rust_tree(tree), tree.tree_core

    def at(i: int):
        depth, node_id, lock = rows[i]
        vals = tuple(_vals(core.get_component_device_value(node_id, _sg_ct(ct)))
                     for ct in comps) if i else ()
        kids, j = [], i + 1
        while j < len(rows) and rows[j][0] > depth:
            kid, j = at(j)
            kids.append(kid)
        return (vals, lock if i else None, tuple(sorted(kids, key=_first_slot))), j

    return at(0)[0]


def _py_shape(node, comps, root: bool = True) -> tuple:
    data = [node.component_data[_sg_ct(ct)] for ct in comps]
    kids = tuple(sorted((_py_shape(c, comps, False) for c in node.children.values()),
                        key=_first_slot))
    if root:
        return ((), None, kids)
    return (tuple(_vals(d.value) for d in data), tuple(d.lock_ref for d in data),
            node.hit_count, node.priority, kids)


def _our_shape(node, comps, rich: bool, root: bool = True) -> tuple:
    kids = tuple(sorted((_our_shape(c, comps, rich, False) for c in node.children.values()),
                        key=_first_slot))
    if root:
        return ((), None, kids)
    vals = tuple(_vals(node.value if ct == FULL else node.component_data[ct].value)
                 for ct in comps)
    if not rich:
        return (vals, node.lock_ref, kids)
    locks = tuple(node.lock_ref if ct == FULL else node.component_data[ct].lock_ref
                  for ct in comps)
    return (vals, locks, node.hit_count, node.priority, kids)


def _requests(p, where: str) -> None:
    live = p.running + ([p.chunked] if p.chunked else [])
    for s, o in live:
        row = p.sg.row(s)[: s.kv.kv_allocated_len].tolist()
        assert row == o.slot_ids, f"{where}: {o.rid}'s row\n  SGLang {row}\n  ours   {o.slot_ids}"
        got = (s.kv.cache_protected_len, s.kv.cache_inserted_len)
        assert got == (o.cache_protected_len, o.cache_inserted_len), f"{where}: {o.rid} lengths"
        st = p.ours.kv_of(o)
        if p.ours.is_swa_enabled:
            got = s.kv.get_evicted_seqlen(_sg_ct(SWA))
            assert got == st.swa_evicted_seqlen, f"{where}: {o.rid} SWA cursor {got}"
        if p.ours.is_mamba_enabled:
            buf = s.kv.mamba_ping_pong_track_buffer
            sg = (_int(s.kv.mamba_pool_idx), None if buf is None else
                  [None if x < 0 else x for x in buf.tolist()], s.kv.mamba_last_track_seqlen)
            want = (st.mamba_pool_idx, st.mamba_ping_pong_track_buffer,
                    st.mamba_last_track_seqlen)
            assert sg == want, f"{where}: {o.rid} Mamba slots\n  SGLang {sg}\n  ours   {want}"


def _first_slot(shape: tuple) -> int:
    """A node's first FULL slot: unique among siblings (slots are owned once), cheap to sort."""
    return shape[0][0][0]


def _int(x) -> int | None:
    return None if x is None else int(x)


def _sg_ct(ct):
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    return ComponentType(int(ct))
