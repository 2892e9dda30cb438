"""A finished request in the host tier, as SGLang 0.5.23 finishes it: release_kv_cache(
checkpoint=True), whose checkpoint_into_tree inserts the sequence and then the page-aligned
prompt alone with priority + 1, splitting the leaf at the prompt boundary
(radix/hosttier/requests.py `finish_running`). Known answers derived in each docstring;
tools/diff_sglang_hicache.py checks the same against SGLang's own checkpoint."""

from __future__ import annotations

from radix.hosttier import HostTierCache
from radix.hosttier.requests import Running, admit_request, finish_running, serve_request
from radix.request import SlotAllocator


def finish(c: HostTierCache, prompt: list[int], tokens: list[int], priority: int) -> None:
    adm = admit_request(c, prompt, len(tokens), priority)
    finish_running(c, Running.admitted(adm), tokens)


def test_finish_splits_at_the_prompt_and_raises_the_prompt_priority():
    """Device 16, host 32, write-through, page 1, priority policy, nothing cached. Prompt
    [1..5], output [6, 7, 8] (KV for all 8), priority 2, on slots 1-8.

    The first insert makes one leaf [1..8] (its first hit: hit count 1; write-through backs it
    up on 8 host slots). The prompt insert (key [1..5], priority 3, inserted_len 5) walks into
    that leaf and splits it after 5 tokens: the upper node [1..5] keeps slots 1-5, the first 5
    host slots and the hit count 1, and rises to priority max(2, 3) = 3; the lower [6, 7, 8]
    keeps slots 6-8, 3 host slots, priority 2. No hit is counted (no node ends past 5), nothing
    is freed (prev_prefix_len 5), nothing stays locked: 8 evictable. The old finish inserted
    the sequence only: one node of 8 at priority 2.

    Then evicting 3 tokens takes the lowest priority first: the output [6, 7, 8] (2 < 3),
    demoted to host (it is backed up); the prompt stays on the device. The old single node
    would have demoted all 8."""
    c = HostTierCache(SlotAllocator(16), 32, "write_through", eviction_policy="priority")
    finish(c, [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6, 7, 8], 2)
    top = c.root_node.children[1]
    (low,) = top.children.values()
    assert (top.key.token_ids, top.value, top.priority, top.hit_count) == (
        [1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 3, 1)
    assert (low.key.token_ids, low.value, low.priority, low.hit_count) == ([6, 7, 8], [6, 7, 8],
                                                                           2, 1)
    assert (len(top.host_value), len(low.host_value), top.lock_ref, low.lock_ref) == (5, 3, 0, 0)
    assert (c.evictable_size_, c.protected_size_, c.allocator.available_size()) == (8, 0, 8)
    c.evict(3)
    assert (top.tier, low.tier, c.counts().demoted) == ("both", "host", 3)
    c.check_invariants()


def test_paged_finish_splits_at_the_floored_prompt():
    """Page 4, device 16, host 32, write_through_selective (no backup on a first hit), LRU.
    Prompt [1..6], output [7..11] with KV: 11 tokens on slots 1-11, the aligned 8 cached. The
    aligned prompt is 4 tokens (6 floored to a page), inside the 8: the leaf [1..8] splits
    4 + 4, [1..4] at priority 0 + 1 = 1, [5..8] at 0. The unaligned tail 9-11 is freed: 8
    slots used, 8 free. A second request with the same prompt and another output, [1..6] +
    [20, 21] (8 tokens, all aligned), priority 5: its match of the prompt minus one [1..5]
    floors to [1..4], a device hit of 4 (hit count 2); its insert walks [1..4] and adds the leaf
    [5, 6, 20, 21] (priority 5) beside [5..8]; the prompt insert, aligned 4, finds the boundary
    already a node edge: no split, [1..4] rises to max(1, 5 + 1) = 6."""
    c = HostTierCache(SlotAllocator(16, page_size=4), 32, "write_through_selective", 4)
    finish(c, [1, 2, 3, 4, 5, 6], list(range(1, 12)), 0)
    top = c.root_node.children[(1, 2, 3, 4)]
    (low,) = top.children.values()
    assert (top.key.token_ids, top.priority, low.key.token_ids, low.priority) == (
        [1, 2, 3, 4], 1, [5, 6, 7, 8], 0)
    assert (c.evictable_size_, c.allocator.available_size()) == (8, 8)
    got = serve_request(c, [1, 2, 3, 4, 5, 6], [20, 21], priority=5)
    assert got[:3] == (4, 0, 2)
    assert top.priority == 6 and len(top.children) == 2
    assert sorted((x.key.token_ids, x.priority) for x in top.children.values()) == [
        ([5, 6, 7, 8], 0), ([5, 6, 20, 21], 5)]
    c.check_invariants()
