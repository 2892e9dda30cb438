"""check_invariants names each broken node rule (its per-node fast path must pass every broken
node on to the rule that names it). A small tree: [1, 2, 3] and [1, 2, 4] make a node [1, 2]
with children [3] and [4]; page 2 and a namespaced key take the paged / namespaced child keys."""

from __future__ import annotations

import pytest

from radix.tree.invariants import InvariantError
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache


def _tree(page_size: int = 1, extra_key: str | None = None) -> tuple[RadixCache, list]:
    c = RadixCache(page_size=page_size)
    if page_size == 1:
        keys = [[1, 2, 3], [1, 2, 4]]
    else:
        keys = [[1, 2, 3, 4], [1, 2, 5, 6]]
    for k in keys:
        c.insert(RadixKey(k, extra_key))
    c.check_invariants()  # the untouched tree is fine
    top = next(iter(c.root_node.children.values()))
    return c, [top, *top.children.values()]


def _broken(c: RadixCache, match: str) -> None:
    with pytest.raises(InvariantError, match=match):
        c.check_invariants()


@pytest.mark.parametrize("page_size,extra_key", [(1, None), (2, None), (1, "lora")])
def test_each_node_rule_is_named(page_size, extra_key):
    c, (top, child, _) = _tree(page_size, extra_key)
    saved = child.value
    child.value = None
    _broken(c, f"node {child.id}: evicted node is reachable")
    child.value = saved[:-1]
    _broken(c, f"node {child.id}: {len(saved) - 1} slot ids for a key of {len(saved)} tokens")
    child.value = saved
    top.lock_ref += 1
    _broken(c, f"node {top.id}: lock_ref {top.lock_ref} != locks held here and below")
    top.lock_ref -= 1
    parent, child.parent = child.parent, c.root_node
    _broken(c, f"node {top.id}: child {child.id} does not point back to its parent")
    child.parent = parent
    (ck, first), *rest = top.children.items()
    top.children = {"elsewhere": first, **dict(rest)}
    _broken(c, f"node {top.id}: child {first.id} is filed under 'elsewhere'")
    top.children = {ck: first, **dict(rest)}
    c.check_invariants()


def test_key_off_the_page_is_named():
    c, (top, child, _) = _tree(page_size=2)
    child.key = RadixKey([*child.key.token_ids, 9])  # filed under the same first page
    child.value = [*child.value, 99]
    _broken(c, f"node {child.id}: key length 3 is not a positive multiple of page 2")
