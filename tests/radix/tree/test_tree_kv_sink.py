"""RadixCache's kv_sink: what was stored and evicted (SGLang's kv_event_queue), nothing else.

The explainer's probe (radix/runs/probe.py) hears the tree through it; the figures it gives are
held by tests/radix/runs/test_explain.py. Here: the known answer on a small tree, and that the kv
sink leaves the step events off (no StepStarted, no lock hops), so the fast paths stay on.
"""

from __future__ import annotations

from radix import events as ev
from radix.events import ListSink
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache


def test_kv_sink_hears_each_insert_and_each_evicted_leaf_with_its_path():
    """Insert [1 2 3], then [1 2 4] (splits [1 2 3] into [1 2] + [3], adds [4]); evict(1)
    pops the older leaf [3]: its path from the root is [1 2 3], its own tokens 1. Then
    evict(3) pops [4] and then [1 2], which became a childless leaf in the same call."""
    kv = ListSink()
    c = RadixCache(kv_sink=kv)
    c.insert([1, 2, 3])
    c.insert(RadixKey([1, 2, 4], extra_key=None))
    c.evict(1)
    c.evict(3)
    inserted = [list(e.token_ids) for e in kv.events if isinstance(e, ev.KeyInserted)]
    evicted = [(list(e.token_ids), e.num_tokens) for e in kv.events
               if isinstance(e, ev.LeafEvicted)]
    assert inserted == [[1, 2, 3], [1, 2, 4]]
    assert evicted == [([1, 2, 3], 1), ([1, 2, 4], 1), ([1, 2], 2)]
    assert {type(e) for e in kv.events} == {ev.KeyInserted, ev.LeafEvicted}
    c.check_invariants()


def test_kv_sink_keeps_namespaces_and_leaves_the_step_events_off():
    """A namespaced key reports its (extra_key, cache_salt); a lock walk reports nothing."""
    kv = ListSink()
    c = RadixCache(kv_sink=kv)
    leaf = c.insert(RadixKey([5, 6], extra_key="lora-a")).last_node
    c.inc_lock_ref(leaf)
    c.dec_lock_ref(leaf)
    assert [(type(e), e.namespace) for e in kv.events] == [(ev.KeyInserted, ("lora-a", None))]
