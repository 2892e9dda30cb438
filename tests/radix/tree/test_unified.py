"""The unified flavor (SGLang 0.5.23's UnifiedRadixCache) and T-LRU: known answers, derivations
in the docstrings. tools/diff_sglang_unified.py checks both against SGLang's own code."""

from __future__ import annotations

import pytest

from radix.tree.evict_policy import get_strategy
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog, TreeModel


def evicted_keys(cache: RadixCache, n: int) -> list[list[int]]:
    return [list(node.key.token_ids) for node in cache.evict(n).evicted_nodes]


@pytest.mark.parametrize("flavor", ["classic", "unified"])
def test_tlru_evicts_the_tel_safe_tail_where_lru_evicts_the_oldest_leaf(flavor):
    """Y = 6 tokens (200..205) is inserted first, then X1 = 10 tokens (100..109), then
    X2 = X1 + 4 tokens (110..113): leaves y (depth 6, history 6) and x2 (depth 14, 4 tokens
    on a 10-token parent path; x's branch history 14). evict(1):

      LRU:   y was used first, so y goes.
      T-LRU, threshold 5, next prompt 0:  x2: budget max(14 + 0 - 5, 0) = 9, cached without
             it 14 - 4 = 10 >= 9, TEL-safe (key -1);  y: budget 6 - 5 = 1, cached without it
             0 < 1, not safe (key 0). So x2 goes, though it is the newer leaf.
      T-LRU, threshold 7, next prompt 2:  x2: 14 + 2 - 7 = 9 <= 10 safe; y: 6 + 2 - 7 = 1 > 0.
             x2 again: the estimate is added to the history, the threshold taken off.
    """
    y, x1 = list(range(200, 206)), list(range(100, 110))
    x2 = x1 + list(range(110, 114))
    got = {}
    for name, config in [("lru", {}), ("tlru", {"threshold": 5}),
                         ("tlru", {"threshold": 7, "next_prompt_estimate": 2})]:
        c = RadixCache(eviction_policy=name, policy_config=config, flavor=flavor)
        for key in (y, x1, x2):
            c.insert(key)
        got[(name, config.get("threshold"))] = evicted_keys(c, 1)
    assert got[("lru", None)] == [y]
    assert got[("tlru", 5)] == [list(range(110, 114))]
    assert got[("tlru", 7)] == [list(range(110, 114))]


def test_tlru_keeps_the_high_water_history_after_the_tail_goes():
    """After x2 (4 tokens) is evicted from the branch above, x (10 tokens, a leaf now) keeps the
    branch's history 14, not its resident depth 10: budget 14 - 5 = 9 > 0 cached above x, so x
    is not TEL-safe, and the next eviction falls back to LRU (y, the older leaf). Had the
    history shrunk to 10, x would still not be safe (budget 5 > 0): the depths are checked."""
    y, x1 = list(range(200, 206)), list(range(100, 110))
    c = RadixCache(eviction_policy="tlru", policy_config={"threshold": 5})
    for key in (y, x1, x1 + list(range(110, 114))):
        c.insert(key)
    c.evict(1)
    x = c.match_prefix(x1).last_node
    assert (x.tlru_history_len, x.tlru_cached_prefix_len) == (14, 10)
    assert evicted_keys(c, 1) == [y]


def test_tlru_rejects_a_bad_config():
    with pytest.raises(TypeError, match="threshold"):
        get_strategy("tlru", {"threshold": "5"})
    with pytest.raises(ValueError, match="unknown policy_config"):
        get_strategy("tlru", {"budget": 5})


def fifo_after_split(flavor: str) -> list[list[int]]:
    c = RadixCache(eviction_policy="fifo", flavor=flavor)
    c.insert([1, 2, 3, 4])
    c.insert([5, 6])
    c.match_prefix([1, 2, 9])  # splits [1 2 3 4] into [1 2] + [3 4]
    return evicted_keys(c, 2) + evicted_keys(c, 1)


def test_a_split_keeps_the_childs_age_in_the_unified_flavor():
    """Logical clock: insert [1 2 3 4] reads 1 (walk) and 2 (the leaf: created 2); insert
    [5 6] reads 3 and 4 (created 4); the match reads 5, the split's new node [1 2] reads 6.
    evict(2) under FIFO takes [3 4] (created 2) before [5 6] (4) in both flavors; then [1 2]
    is a leaf: classic created it at 6 (younger than [5 6]), so [5 6] goes; unified keeps the
    child's creation time 2 for it (UnifiedTreeCore._split_node), so [1 2] goes."""
    assert fifo_after_split("classic") == [[3, 4], [5, 6]]
    assert fifo_after_split("unified") == [[3, 4], [1, 2]]


def test_a_split_touches_the_child_after_the_new_node_in_the_unified_flavor():
    """classic: the new node [1 2] reads the clock (6) after the walk wrote 5 to the child;
    unified: the child is touched again (7) after the new node exists, so it is the younger."""
    for flavor, new_times, child_time in [("classic", (6.0, 6.0), 5.0),
                                           ("unified", (6.0, 2.0), 7.0)]:
        c = RadixCache(flavor=flavor)
        child = c.insert([1, 2, 3, 4]).last_node
        c.insert([5, 6])
        new = c.match_prefix([1, 2, 9]).last_node
        assert (new.last_access_time, new.creation_time) == new_times, flavor
        assert child.last_access_time == child_time, flavor


def test_replaying_a_unified_run_rebuilds_its_times():
    """The events law holds in the unified flavor: the split's creation time and the child's
    extra touch travel in the events."""
    log = EventLog(keyframe_every=2, page_size=1)
    c = RadixCache(flavor="unified", eviction_policy="tlru", sink=log)
    for key in ([1, 2, 3, 4], [5, 6], [1, 2, 9, 9], [1, 7]):
        c.insert(key)
    c.match_prefix([5, 8])
    c.evict(3)
    model = TreeModel(1)
    model.apply_all(log)
    assert model.snapshot() == c.snapshot()


def test_an_unknown_flavor_is_refused():
    with pytest.raises(ValueError, match="flavor"):
        RadixCache(flavor="rust")
