"""Span attention (engine/attention.py) against a brute-force per-request causal softmax.

Random K/V in a small pool; requests built as trees of shared slot prefixes, as the radix tree
hands them out, each with a span of new tokens at its end (a decode step: spans of one). The
oracle gathers each request's whole context and runs plain causal softmax attention.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

HEADS, KV_HEADS, DIM = 6, 2, 8

# torch and the engine: imported by _imports before this file's first test, so that collecting
# the suite imports no torch (see tests/doctest_rule.py)
torch = SharedGroup = attend = plan_spans = shared_prefix_groups = KVPool = None


@pytest.fixture(autouse=True, scope="module")
def _imports():
    global torch, SharedGroup, attend, plan_spans, shared_prefix_groups, KVPool
    import torch

    from engine.attention import SharedGroup, attend, plan_spans, shared_prefix_groups
    from engine.kv_pool import KVPool


def _pool(size: int = 400, seed: int = 0) -> KVPool:
    torch.manual_seed(seed)
    pool = KVPool(size, num_layers=2, num_kv_heads=KV_HEADS, head_dim=DIM)
    for buf in pool.k_buffer + pool.v_buffer:
        buf.normal_()
    return pool


def _oracle(pool: KVPool, layer: int, q: torch.Tensor, slot_lists: list[list[int]],
            lens: list[int]) -> torch.Tensor:
    """Query j of a request with n new tokens at the end of its L slots sees keys 0..L-n+j."""
    out, row = [], 0
    for slots, n in zip(slot_lists, lens):
        k, v = pool.read(layer, torch.tensor(slots))  # [L, kv, d]
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        for j in range(n):
            seen = len(slots) - n + j + 1
            w = torch.softmax(torch.einsum("hd,lhd->hl", q[row], k[:seen]) / math.sqrt(DIM), -1)
            out.append(torch.einsum("hl,lhd->hd", w, v[:seen]))
            row += 1
    return torch.stack(out)


def _plan(lists: list[list[int]], lens: list[int], **kw):
    return plan_spans(lists, [len(s) - n for s, n in zip(lists, lens)], torch.device("cpu"), **kw)


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
def test_decode_step_equals_per_request_attention_mixed_batch(padded):
    """Spans of one (a decode step). Four requests share 120 slots, two of them 180; one shares
    nothing. Both layouts of the own part (padded and flat)."""
    pool = _pool()
    common, deeper = list(range(1, 121)), list(range(121, 181))
    lists = [common + deeper + [181, 182], common + deeper + [183], common + [184, 185, 186],
             common + [187], list(range(190, 250))]
    plan = _plan(lists, [1] * 5, padded=padded)
    assert (plan.flat is None) == padded
    assert [(g.tolist(), len(s)) for g, s in plan.groups] == [([0, 1, 2, 3], 120)]
    q = torch.randn(len(lists), HEADS, DIM)
    for layer in (0, 1):
        got = attend(pool, layer, q, plan, 1 / math.sqrt(DIM))
        assert (got - _oracle(pool, layer, q, lists, [1] * 5)).abs().max() < 1e-5


def test_prefill_spans_sharing_a_prefix_are_grouped():
    """Three prefills of 5, 3 and 1 new tokens after the same 100 cached slots, and a cold one
    of 4 tokens. The group holds the 5 + 3 + 1 = 9 query rows 0..8 and reads the 100 shared
    slots once (64 + 100 + 3 x 1 = 167 < 3 x 101 gathered); row 9.. are the cold request's.
    Spans longer than one join a group only when asked (max_group_span; the default is 1)."""
    pool = _pool()
    shared = list(range(1, 101))
    lists = [shared + list(range(200, 205)), shared + [210, 211, 212], shared + [220],
             list(range(300, 304))]
    lens = [5, 3, 1, 4]
    assert _plan(lists, lens).groups == []  # by default only spans of one (decode) group
    assert _plan(lists[:2], lens[:2]).groups == []  # no span short enough: nobody to group
    for padded in (None, True, False):
        plan = _plan(lists, lens, padded=padded, max_group_span=5)
        assert [(g.tolist(), len(s)) for g, s in plan.groups] == [(list(range(9)), 100)]
        q = torch.randn(sum(lens), HEADS, DIM)
        got = attend(pool, 1, q, plan, 1 / math.sqrt(DIM))
        assert (got - _oracle(pool, 1, q, lists, lens)).abs().max() < 1e-5


@st.composite
def _slot_forest(draw):
    """Requests as paths in a random tree of slot runs: each picks a parent request and a cut,
    then a span of new tokens (1..5, within its own run) at its end."""
    next_slot, lists, lens = 1, [], []
    for _ in range(draw(st.integers(1, 7))):
        base = []
        if lists and draw(st.booleans()):
            parent = lists[draw(st.integers(0, len(lists) - 1))]
            base = parent[:draw(st.integers(0, len(parent)))]
        own = draw(st.integers(1, 40))
        lists.append(base + list(range(next_slot, next_slot + own)))
        lens.append(draw(st.integers(1, min(own, 5))))
        next_slot += own
    if draw(st.booleans()):
        lens = [1] * len(lists)  # a decode step
    return (lists, lens, draw(st.sampled_from([0, 1, 8, 16])),
            draw(st.sampled_from([None, True, False])))


@settings(max_examples=60, deadline=None)
@given(_slot_forest())
def test_attend_equals_oracle_for_any_sharing(case):
    lists, lens, min_shared, padded = case
    pool = _pool(size=300)
    plan = _plan(lists, lens, min_shared=max(min_shared, 1), padded=padded, max_group_span=5)
    offsets = [sum(lens[:b]) for b in range(len(lens))]
    for rows, shared in plan.groups:  # every member's new tokens all see the shared slots
        for b in range(len(lists)):
            if offsets[b] in rows.tolist():
                assert lists[b][:len(shared)] == shared.tolist()
                assert len(lists[b]) - lens[b] >= len(shared)
    q = torch.randn(sum(lens), HEADS, DIM)
    got = attend(pool, 1, q, plan, 1 / math.sqrt(DIM))
    assert (got - _oracle(pool, 1, q, lists, lens)).abs().max() < 1e-5
