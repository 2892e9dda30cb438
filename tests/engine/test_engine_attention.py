"""Cascade decode attention (engine/attention.py) against a brute-force per-request softmax.

Random K/V in a small pool; requests built as trees of shared slot prefixes, as the radix tree
hands them out. The oracle gathers each request's whole context and runs plain softmax attention.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

HEADS, KV_HEADS, DIM = 6, 2, 8

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
torch = SharedGroup = cascade_decode = plan_decode = shared_prefix_groups = KVPool = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, SharedGroup, cascade_decode, plan_decode, shared_prefix_groups, KVPool
    import torch

    from engine.attention import SharedGroup, cascade_decode, plan_decode, shared_prefix_groups
    from engine.kv_pool import KVPool


def _pool(size: int = 400, seed: int = 0) -> KVPool:
    torch.manual_seed(seed)
    pool = KVPool(size, num_layers=2, num_kv_heads=KV_HEADS, head_dim=DIM)
    for buf in pool.k_buffer + pool.v_buffer:
        buf.normal_()
    return pool


def _oracle(pool: KVPool, layer: int, q: torch.Tensor, slot_lists: list[list[int]]) -> torch.Tensor:
    out = []
    for b, slots in enumerate(slot_lists):
        k, v = pool.read(layer, torch.tensor(slots))  # [L, kv, d]
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        w = torch.softmax(torch.einsum("hd,lhd->hl", q[b], k) / math.sqrt(DIM), dim=-1)
        out.append(torch.einsum("hl,lhd->hd", w, v))
    return torch.stack(out)


def test_groups_known_answer():
    """Three requests hold slots 1..100 then two of their own; one shares nothing. The group
    gathers GROUP_COST + 100 + 3 x 2 = 170 slots, apart they gather 3 x 102 = 306: grouped.
    Sharing only 30 (slots 71..100): 64 + 30 + 6 = 100 > 3 x 32 = 96: not worth a group."""
    shared = list(range(1, 101))
    lists = [shared + [200, 201], shared + [202, 203], shared + [204, 205], [300, 301, 302]]
    assert shared_prefix_groups(lists) == [SharedGroup([0, 1, 2], 100)]
    short = [s[70:] for s in lists[:3]] + [lists[3]]  # 30 shared: 64 + 30 + 6 = 100 > 96
    assert shared_prefix_groups(short) == []
    assert shared_prefix_groups([shared, shared]) == [SharedGroup([0, 1], 99)]  # each keeps one


@pytest.mark.parametrize("padded", [True, False])
def test_cascade_equals_per_request_attention_mixed_batch(padded):
    """Four requests share 120 slots, two of them 180; one shares nothing. Both layouts of the
    own part (padded and flat)."""
    pool = _pool()
    common, deeper = list(range(1, 121)), list(range(121, 181))
    lists = [common + deeper + [181, 182], common + deeper + [183], common + [184, 185, 186],
             common + [187], list(range(190, 250))]
    plan = plan_decode(lists, torch.device("cpu"), padded=padded)
    assert (plan.own_mask is not None) == padded
    assert [(g.tolist(), len(s)) for g, s in plan.groups] == [([0, 1, 2, 3], 120)]
    q = torch.randn(len(lists), HEADS, DIM)
    for layer in (0, 1):
        got = cascade_decode(pool, layer, q, plan, 1 / math.sqrt(DIM))
        assert (got - _oracle(pool, layer, q, lists)).abs().max() < 1e-5


@st.composite
def _slot_forest(draw):
    """Requests as paths in a random tree of slot runs: each picks a parent request and a cut."""
    next_slot, lists = 1, []
    for _ in range(draw(st.integers(1, 7))):
        base = []
        if lists and draw(st.booleans()):
            parent = lists[draw(st.integers(0, len(lists) - 1))]
            base = parent[:draw(st.integers(0, len(parent)))]
        own = draw(st.integers(1, 40))
        lists.append(base + list(range(next_slot, next_slot + own)))
        next_slot += own
    return lists, draw(st.sampled_from([0, 1, 8, 16])), draw(st.sampled_from([None, True, False]))


@settings(max_examples=60, deadline=None)
@given(_slot_forest())
def test_cascade_equals_oracle_for_any_sharing(case):
    lists, min_shared, padded = case
    pool = _pool(size=300)
    plan = plan_decode(lists, torch.device("cpu"), min_shared=max(min_shared, 1), padded=padded)
    for members, shared in plan.groups:  # every member really holds the shared slots
        for b in members.tolist():
            assert lists[b][:len(shared)] == shared.tolist() and len(lists[b]) > len(shared)
    q = torch.randn(len(lists), HEADS, DIM)
    got = cascade_decode(pool, 1, q, plan, 1 / math.sqrt(DIM))
    assert (got - _oracle(pool, 1, q, lists)).abs().max() < 1e-5
