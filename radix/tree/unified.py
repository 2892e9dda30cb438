"""The unified flavor: where SGLang 0.5.23's UnifiedRadixCache differs from its classic
RadixCache on a standard full-attention model (one FULL component), as found by driving both
(tools/diff_sglang_unified.py): a split's times (`split_times`) and which nodes a walk that cut
an edge is seen to touch (`touched_ids`). RadixCache(flavor="unified") is the default.
Leaves out: SWA and Mamba components, sessions, storage prefetch, the host tier (its own
sub-package, radix/hosttier/; docs/HOST_TIER.md).
"""

from __future__ import annotations

from typing import Any

from radix.tree.node import TreeNode

# tools/diff_sglang_unified.py drives our tree beside the unified cache with the Rust TreeCore
# (0.5.23's default) and with the Python TreeCore (unified_cache/unified_tree_core.py). With our
# classic flavor, the lifecycles agree except where a split's times matter:
#
#     split   the new upper node keeps the child's creation_time (classic: it reads the clock,
#             so it is younger than the child); the child, not the new node, takes the last
#             clock read (unified: child.last_access_time is set after the new node is made)
#
# so FIFO and FILO evict differently after a split (found: `--flavor classic`, page 1, fifo
# seed 3 and filo seed 2). T-LRU (evict_policy.py's `make_tlru`) exists only in the unified
# cache.

FLAVORS = ("classic", "unified")  # radix_cache.RadixCache, or 0.5.23's UnifiedRadixCache


def split_times(cache: Any, new: TreeNode, child: TreeNode) -> None:
    """After RadixCache._split_node made `new` above `child` (new read the clock when it was
    made): the unified TreeCore's times. `new` inherits the child's creation time; the child is
    touched after the new node exists (one more read of `cache.clock`), so it is the younger of
    the two.

        classic: new.creation = new.last_access = t1 > child.last_access = t0
        unified: new.creation = child.creation,  child.last_access = t2 > new.last_access = t1
    """
    new.creation_time = child.creation_time
    child.last_access_time = cache.clock()


def touched_ids(path: list[TreeNode], cut: TreeNode | None, flavor: str) -> tuple[int, ...]:
    """The ids of the root and each node a walk entered, as a NodesTouched event says them:
    `path` but, where the walk cut an edge, its lower half `cut` (classic) or nothing (unified:
    the split touched it after the walk's time, `split_times`).

    >>> class N: id = 0
    >>> upper, lower = N(), N(); upper.id, lower.id = 5, 2
    >>> touched_ids([upper], lower, "classic"), touched_ids([upper], lower, "unified")
    ((0, 2), (0,))
    """
    ids = [0, *(x.id for x in path)]
    if cut is not None:
        if flavor == "unified":
            ids.pop()
        else:
            ids[-1] = cut.id
    return tuple(ids)
