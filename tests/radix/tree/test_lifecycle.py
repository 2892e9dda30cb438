"""SGLang 0.5.23's request lifecycle: checkpoint / release_kv_cache behind the seed's names, hits
past inserted_len, the prompt-boundary split, frees in order, shortfall eviction, retraction."""

from __future__ import annotations

import pytest

from radix.request import Req, SlotAllocator
from radix.runs.ops import replay_ops
from radix.sched.admission import (
    alloc_for_decode,
    alloc_for_extend,
    check_decode_mem,
    evict_shortfall,
    retract_decode,
)
from radix.traces.ops import parse_ops
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import TreeModel


class FreeLog(SlotAllocator):
    """Remembers each free call, in order."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.frees: list[list[int]] = []

    def free(self, slot_ids) -> None:
        self.frees.append(list(slot_ids))
        super().free(slot_ids)


def _prefilled(cache: RadixCache, alloc, rid: str, prompt: list[int], priority: int = 0) -> Req:
    """Matched (prompt[:-1]), locked, allocated, prefilled and checkpointed, as the scheduler."""
    req = Req(rid, prompt, priority=priority)
    m = cache.match_prefix(prompt[:-1])
    req.prefix_indices, req.last_node, req.cache_protected_len = m.slot_ids, m.last_node, \
        m.prefix_len
    cache.inc_lock_ref(m.last_node)
    alloc_for_extend(cache, alloc, [req], [len(prompt) - m.prefix_len])
    req.fill_ids = list(prompt)
    cache.cache_unfinished_req(req)
    return req


def test_finish_splits_at_the_prompt_with_priority_plus_one():
    """Prompt [1..5], priority 2, outputs 7 8 9: the row holds 5 + 3 - 1 = 7 slots. Finish
    inserts [1..5 7 8] (prompt node exists: one new node [7 8]); the prompt re-insert
    raises [1..5] (and the root) to 3, the output node keeps 2."""
    alloc = SlotAllocator(32)
    cache = RadixCache(allocator=alloc)
    req = _prefilled(cache, alloc, "a", [1, 2, 3, 4, 5], priority=2)
    for token in (7, 8, 9):
        req.output_ids.append(token)
    alloc_for_decode(cache, alloc, [req])
    alloc_for_decode(cache, alloc, [req])
    cache.cache_finished_req(req)
    prompt = cache.root_node.children[1]
    (output,) = prompt.children.values()
    assert (prompt.key.token_ids, prompt.priority) == ([1, 2, 3, 4, 5], 3)
    assert (output.key.token_ids, output.priority) == ([7, 8], 2)
    assert cache.root_node.priority == 3 and cache.protected_size() == 0
    assert alloc.available_size() == 32 - 7


def test_hits_count_once_per_request():
    """A request checkpoints its prompt (hit 1 on the new node), then finishes: the finish
    insert walks the prompt again but counts only the new output node (inserted_len 4)."""
    alloc = SlotAllocator(32)
    cache = RadixCache(allocator=alloc)
    req = _prefilled(cache, alloc, "a", [1, 2, 3, 4])
    assert req.cache_inserted_len == 4
    req.output_ids += [5, 6]
    alloc_for_decode(cache, alloc, [req])
    cache.release_kv_cache(req, checkpoint=True)
    prompt = cache.root_node.children[1]
    assert prompt.hit_count == 1 and next(iter(prompt.children.values())).hit_count == 1


def test_paged_release_frees_in_order():
    """Page 4, prompt of 6 tokens, 3 outputs (row of 8 committed + 2 over-allocated slots in a
    new page): kv_len_to_handle 8. The checkpoint inserts 8 (nothing duplicated), the tail
    [8, 8) is empty, the unlock moves nothing, then the over-allocated page [8, 10) goes."""
    alloc = FreeLog(64, page_size=4)
    cache = RadixCache(page_size=4, allocator=alloc)
    req = _prefilled(cache, alloc, "a", [1, 2, 3, 4, 5, 6])
    assert alloc.frees == [] and req.cache_protected_len == 4  # the partial page stays
    req.output_ids += [7, 8, 9]
    alloc_for_decode(cache, alloc, [req])
    alloc_for_decode(cache, alloc, [req])
    req.slot_ids += alloc.alloc_extend(req.slot_ids[-1], 2)  # speculative, never committed
    cache.cache_finished_req(req, kv_len_to_handle=8)
    assert alloc.frees == [req.slot_ids[8:10]]
    assert cache.total_size() == 8 and alloc.available_size() == 64 - 8


def test_paged_finish_frees_the_unaligned_tail():
    """Page 4, prompt of 5 tokens, 1 output: the row holds 5 slots, 4 go into the tree, slot 5's
    page is freed as the tail."""
    alloc = FreeLog(64, page_size=4)
    cache = RadixCache(page_size=4, allocator=alloc)
    req = _prefilled(cache, alloc, "a", [1, 2, 3, 4, 5])
    req.output_ids.append(9)
    cache.cache_finished_req(req)
    assert alloc.frees == [req.slot_ids[4:5]] and alloc.available_size() == 60


def test_evict_only_the_shortfall():
    """8 free slots of 40, 32 cached in two unlocked leaves of 16: asking for 10 evicts
    10 - 8 = 2, which takes one whole leaf (16); then 24 are free and nothing more goes."""
    alloc = SlotAllocator(40)
    cache = RadixCache(allocator=alloc)
    for first in (1, 2):
        req = _prefilled(cache, alloc, str(first), [first] * 16)
        cache.release_kv_cache(req, checkpoint=False)
    assert alloc.available_size() == 8
    assert evict_shortfall(cache, alloc, 10) == 16 and evict_shortfall(cache, alloc, 10) == 0


def test_paged_extend_demand_holds_a_page_per_request():
    """Page 4, pool of 24 (6 pages), 16 cached: extending two requests by 3 and 1 tokens wants
    4 + 2 * 4 = 12 tokens; 8 are free, so 4 are evicted (one node of 8 goes)."""
    alloc = SlotAllocator(24, page_size=4)
    cache = RadixCache(page_size=4, allocator=alloc)
    for first in (1, 2):
        req = _prefilled(cache, alloc, str(first), [first] * 9)
        cache.release_kv_cache(req, checkpoint=True)
    assert (alloc.available_size(), cache.evictable_size()) == (8, 16)
    a, b = Req("a", [5, 6, 7]), Req("b", [8])
    assert alloc_for_extend(cache, alloc, [a, b], [3, 1]) == 8
    assert len(a.slot_ids) == 3 and len(b.slot_ids) == 1


def test_retraction_order_frees_and_ratio():
    """Pool of 10: a (prompt 4, 2 outputs: a row of 5) and b (prompt 3, 1 output: 3) hold 8,
    one more slot is taken, so 1 is free and the decode step needs 2: retract. b has fewer
    outputs, so b goes and its 3 own slots come back (4 free). The ratio over a alone:
    min(1, (2 + 20) / (8 + 1)) = 1."""
    alloc = SlotAllocator(10)
    cache = RadixCache(allocator=alloc)
    a = Req("a", [1, 2, 3, 4], output_ids=[5, 6], max_new_tokens=8, slot_ids=alloc.alloc(5))
    b = Req("b", [7, 8, 9], output_ids=[1], max_new_tokens=8, slot_ids=alloc.alloc(3))
    for r in (a, b):
        r.last_node = cache.root_node
    alloc.alloc(1)
    assert not check_decode_mem(cache, alloc, [a, b])
    kept, retracted, ratio = retract_decode(cache, alloc, [a, b])
    assert [r.rid for r in kept] == ["a"] and [r.rid for r in retracted] == ["b"]
    assert b.slot_ids == [] and b.cache_inserted_len == 0 and alloc.available_size() == 4
    assert ratio == min(1.0, (2 + 20) / (8 + 1))


def test_op_trace_start_matches_all_but_the_last_token():
    """A fully cached 4-token prompt: start matches 3 (the last token is always computed)."""
    trace = parse_ops('{"op": "config", "capacity": 16}\n'
                      '{"op": "insert", "tokens": [1, 2, 3, 4]}\n'
                      '{"op": "start", "rid": "a", "tokens": [1, 2, 3, 4]}')
    assert replay_ops(trace).results[1]["prefix_len"] == 3


@pytest.mark.parametrize("page", [1, 4])
def test_events_rebuild_the_tree_after_lifecycles(page):
    """Replaying the events of checkpoints, splits and releases rebuilds the same tree."""
    from radix.events import ListSink
    sink = ListSink()
    alloc = SlotAllocator(256, page_size=page)
    cache = RadixCache(page_size=page, allocator=alloc, sink=sink)
    for i, prompt in enumerate([[1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9], [1, 2, 3, 4, 5, 6, 7]]):
        req = _prefilled(cache, alloc, str(i), prompt, priority=i)
        req.output_ids += [8, 8, 8]
        alloc_for_decode(cache, alloc, [req])
        alloc_for_decode(cache, alloc, [req])
        cache.cache_finished_req(req)
    model = TreeModel(page)
    model.apply_all(sink.events)
    assert model.snapshot() == cache.snapshot()
