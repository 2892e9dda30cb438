"""What SGLang 0.5.23's UnifiedRadixCache does differently from its classic RadixCache, on a
standard full-attention model (one FULL component), as found by driving both real classes.

tools/diff_sglang_unified.py drives our tree beside the unified cache with the Rust TreeCore
(0.5.23's default) and with the Python TreeCore (unified_cache/unified_tree_core.py). With our
classic flavor, the lifecycles agree except where a split's times matter:

    split   the new upper node keeps the child's creation_time (classic: it reads the clock,
            so it is younger than the child); the child, not the new node, takes the last
            clock read (unified: child.last_access_time is set after the new node is made)

so FIFO and FILO evict differently after a split (found: `--flavor classic`, page 1, fifo
seed 3 and filo seed 2). T-LRU (eviction.py) exists only in the unified cache.
Leaves out: SWA and Mamba components, sessions, storage prefetch, the host tier (its own
sub-package, radix/hosttier/; docs/HOST_TIER.md).
"""

from __future__ import annotations

from typing import Any


def split_times(cache: Any, new: Any, child: Any) -> None:
    """After _split_node made `new` above `child` (new read the clock when it was made): the
    unified TreeCore's times. `new` inherits the child's creation time; the child is touched
    after the new node exists, so it is the younger of the two.

        classic: new.creation = new.last_access = t1 > child.last_access = t0
        unified: new.creation = child.creation,  child.last_access = t2 > new.last_access = t1
    """
    new.creation_time = child.creation_time
    child.last_access_time = cache.clock()
