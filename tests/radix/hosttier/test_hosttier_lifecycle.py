"""The host tier's chunked and retracting lifecycle (radix/hosttier/requests.py): a chunked
prefill's checkpoint and a retraction, known answers derived in each docstring.
tools/diff_sglang_hicache.py --lifecycle chunked checks the same against SGLang 0.5.23's own
UnifiedRadixCache.checkpoint."""

from __future__ import annotations

from radix.hosttier import HostTierCache
from radix.hosttier.requests import (
    Running,
    admit_request,
    checkpoint_request,
    finish_running,
    retract_request,
)
from radix.request import SlotAllocator

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]


def start(policy: str = "write_through_selective") -> tuple[HostTierCache, Running]:
    c = HostTierCache(SlotAllocator(16), 32, policy)
    adm = admit_request(c, PROMPT, len(PROMPT))
    return c, Running.admitted(adm)


def test_checkpoint_moves_the_lock_and_counts_each_node_once():
    """Device 16, write_through_selective (backup at the second hit). An 8-token prompt is
    checkpointed after 4 tokens: node [1..4] is made (1 hit), the lock moves onto it (4
    protected), the request's row is the tree's. The finish inserts [1..8] from
    cache_inserted_len 4 on, so [1..4] (ending at 4, not past it) counts no second hit and is
    not backed up; the new leaf [5..8] counts its first. Nothing is locked after, 8 slots used."""
    c, run = start()
    checkpoint_request(c, run, PROMPT, 4)
    first = run.node
    assert (first.key.token_ids, run.protected, run.inserted, c.protected_size_) == (
        [1, 2, 3, 4], 4, 4, 4)
    assert first.lock_ref == 1 and run.row[:4] == first.value
    finish_running(c, run, PROMPT)
    leaf = first.children[5]
    assert (first.hit_count, leaf.hit_count, first.host_value) == (1, 1, None)
    assert (c.protected_size_, c.evictable_size_, c.allocator.available_size()) == (0, 8, 8)


def test_checkpoint_dedups_against_the_tree_from_the_protected_prefix():
    """Two requests for the same prompt, both admitted on an empty tree (8 + 8 slots). The first
    checkpoints at 6: [1..6] on its slots 1-6. The second checkpoints at 6 too: the walk finds
    [1..6], frees its own slots 9-14 as duplicates, and its row now points at 1-6."""
    c = HostTierCache(SlotAllocator(16), 32)
    runs = [Running.admitted(admit_request(c, PROMPT, len(PROMPT))) for _ in range(2)]
    freed: list[int] = []
    free = c.allocator.free
    c.allocator.free = lambda ids: (freed.extend(ids), free(ids))[1]
    for run in runs:
        checkpoint_request(c, run, PROMPT, 6)
    assert freed == [9, 10, 11, 12, 13, 14]
    assert runs[1].row == [1, 2, 3, 4, 5, 6, 15, 16] and runs[0].node.lock_ref == 2


def test_retraction_frees_its_own_slots_and_drops_the_lock():
    """Checkpointed after 4 tokens, then retracted: the checkpointed [1..4] stays in the tree
    (evictable), the request's own slots 5-8 (computed or only allocated) are freed, no lock."""
    c, run = start("write_through")
    checkpoint_request(c, run, PROMPT, 4)
    retract_request(c, run)
    assert (c.protected_size_, c.evictable_size_, c.allocator.available_size()) == (0, 4, 12)
    assert run.node.lock_ref == 0 and not run.node.children
    c.check_invariants()
