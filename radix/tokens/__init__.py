"""Token (and slot) sequences stored as runs of consecutive ints, and helpers over them.

A Mooncake hash id h stands for the 512 tokens h*512 .. h*512+511, so a 40,000-token prompt is a
handful of runs, not 40,000 Python ints: `TokenRuns` (runs.py) is the immutable sequence the
tree, the block-extent cache and the simulator keep, `RunList` its mutable sibling for a
request's growing rows (output_ids, slot_ids), with the helpers that compare and join either
kind and the common-prefix walks that the tree and both kinds share (KV slots are handed out
as runs by radix/request.py's SlotAllocator(runs=True)).
Follows nothing upstream. Leaves out: per-token storage of any kind.
"""

from radix.tokens.runs import (
    RunList,
    TokenRuns,
    common_prefix,
    common_prefix_from,
    frozen,
    is_compact,
    joined,
    mutable_copy,
)

__all__ = ["RunList", "TokenRuns", "common_prefix", "common_prefix_from", "frozen", "is_compact",
           "joined", "mutable_copy"]
