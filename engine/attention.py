"""Cascade (shared-prefix) decode attention over KV pool slots.

The radix tree dedups a shared prefix, so requests that share it hold the very same slot ids.
A decode step groups such requests, gathers each group's shared K/V once per layer and attends
all its queries to it in one matmul; each request then attends to its own remaining KV (one flat,
unpadded gather), and the two partial softmaxes merge exactly by log-sum-exp. This follows
FlashInfer's cascade attention and vLLM's use_cascade_attention / merge_attn_states, with one
level per group chosen by a gather-cost model. Leaves out: multi-level cascades, fused kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from engine.kv_pool import KVPool

MIN_SHARED_LEN = 16  # a group shares at least this many leading slots
GROUP_COST = 64  # a group's fixed cost in gathered tokens (one more matmul, merge, launches)
MAX_SPLIT_DEPTH = 200  # subtle: the split recursion peels one request per level at worst


class SharedGroup(NamedTuple):
    members: list[int]  # indexes into the batch of the requests sharing the prefix
    shared_len: int  # leading slots they all hold, each keeps at least its last slot of its own


def shared_prefix_groups(slot_lists: Sequence[Sequence[int]],
                         min_shared: int = MIN_SHARED_LEN) -> list[SharedGroup]:
    """Groups requests by identical leading slot ids, minimising the slots gathered per layer.

    Sorted lexicographically, the common prefix of a run of requests is the minimum of its
    neighbours' common prefixes; each run either shares that minimum (one group) or splits where
    the minimum occurs, whichever gathers fewer slots (GROUP_COST per group). Three requests
    share 80 slots, two of them 100; d shares nothing. One group of three gathers
    64 + 80 + (21 + 21 + 2) = 188 slots, a pair plus c alone 64 + 100 + 2 + 82 = 248:
    >>> a, b = list(range(100)) + [500], list(range(100)) + [600]
    >>> c, d = list(range(80)) + [700, 701], [900, 901]
    >>> shared_prefix_groups([a, b, c, d])
    [SharedGroup(members=[0, 1, 2], shared_len=80)]
    >>> shared_prefix_groups([a, b, c, d], min_shared=90)  # 80 is too short to share
    [SharedGroup(members=[0, 1], shared_len=100)]
    """
    order = sorted(range(len(slot_lists)), key=lambda i: list(slot_lists[i]))
    lcp = [_common_len(slot_lists[a], slot_lists[b]) for a, b in zip(order, order[1:])]
    sizes = [len(s) for s in slot_lists]
    groups = _best_split(order, lcp, sizes, 0, len(order), min_shared, 0)[1]
    return sorted(groups, key=lambda g: g.members[0])


def _common_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix, capped so each keeps its last slot (binary search on slices:
    the equal-prefix predicate is monotone)."""
    a, b = list(a), list(b)
    lo, hi = 0, min(len(a), len(b)) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return max(lo, 0)


def _best_split(order: list[int], lcp: list[int], sizes: list[int], lo: int, hi: int,
                min_shared: int, depth: int) -> tuple[int, list[SharedGroup]]:
    """(slots gathered, groups) for the sorted run order[lo:hi]."""
    if hi - lo == 1 or depth > MAX_SPLIT_DEPTH:
        return sum(sizes[order[i]] for i in range(lo, hi)), []
    m = min(lcp[lo:hi - 1])
    cuts = [lo] + [i + 1 for i in range(lo, hi - 1) if lcp[i] == m] + [hi]
    split_cost, split_groups = 0, []
    for a, b in zip(cuts, cuts[1:]):
        cost, groups = _best_split(order, lcp, sizes, a, b, min_shared, depth + 1)
        split_cost += cost
        split_groups += groups
    if m >= min_shared:
        whole = GROUP_COST + m + sum(sizes[order[i]] - m for i in range(lo, hi))
        if whole <= split_cost:
            return whole, [SharedGroup(sorted(order[lo:hi]), m)]
    return split_cost, split_groups


class DecodePlan(NamedTuple):
    """Index tensors of one decode step, shared by every layer. The own part (each request's
    slots past its group's shared part) is either padded [B, W] or flat [T] with its request."""

    groups: list[tuple[torch.Tensor, torch.Tensor]]  # (member indexes [n], shared slots [m])
    own_slots: torch.Tensor  # padded: [B, W] (pad slot 0); flat: [T]
    own_req: torch.Tensor | None  # flat: [T] batch index of each slot; padded: None
    own_mask: torch.Tensor | None  # padded: [B, 1, 1, W] True for real slots; flat: None


PADDED_WASTE = 3  # pad when B x W <= this x T: a padded slot costs ~1/3 of a flat one (matmul)


def plan_decode(slot_lists: Sequence[Sequence[int]], device: torch.device,
                min_shared: int = MIN_SHARED_LEN, padded: bool | None = None) -> DecodePlan:
    """Groups (shared_prefix_groups) and own slots; `padded` None picks the cheaper layout."""
    shared_len = [0] * len(slot_lists)
    groups = []
    for g in shared_prefix_groups(slot_lists, min_shared):
        for i in g.members:
            shared_len[i] = g.shared_len
        groups.append((torch.tensor(g.members, device=device),
                       torch.tensor(list(slot_lists[g.members[0]][:g.shared_len]),
                                    device=device)))
    own = [list(sl[n:]) for sl, n in zip(slot_lists, shared_len)]
    lens = [len(o) for o in own]
    if padded is None:
        padded = len(own) * max(lens) <= PADDED_WASTE * sum(lens)
    if padded:
        width = max(lens)
        slots = torch.tensor([o + [0] * (width - len(o)) for o in own], device=device)
        lens_t = torch.tensor(lens, device=device)
        mask = torch.arange(width, device=device)[None, :] < lens_t[:, None]
        return DecodePlan(groups, slots, None, mask[:, None, None])
    req = [b for b, n in enumerate(lens) for _ in range(n)]
    return DecodePlan(groups, torch.tensor([s for o in own for s in o], device=device),
                      torch.tensor(req, device=device), None)


def cascade_decode(pool: KVPool, layer: int, q: torch.Tensor, plan: DecodePlan,
                   scaling: float) -> torch.Tensor:
    """One query per request, q [B, heads, d] -> attention output [B, heads, d].

    With no group and a padded layout this is the plain fused SDPA over padded slots; otherwise
    the softmax runs in fp32 whatever the pool's dtype, and the output has q's dtype.
    """
    b, heads, d = q.shape
    if not plan.groups and plan.own_mask is not None:  # nothing shared: fused SDPA, no LSE needed
        k, v = pool.read(layer, plan.own_slots)  # [B, W, kv_heads, d]
        o = F.scaled_dot_product_attention(
            q[:, None].transpose(1, 2), k.transpose(1, 2).to(q.dtype),
            v.transpose(1, 2).to(q.dtype), attn_mask=plan.own_mask, scale=scaling,
            enable_gqa=True)  # [B, heads, 1, d]
        return o[:, :, 0]
    kv_heads = pool.num_kv_heads
    qg = q.float().view(b, kv_heads, heads // kv_heads, d)
    own = _own_flat if plan.own_mask is None else _own_padded
    out, lse = own(pool, layer, qg, plan, scaling)
    for members, shared_slots in plan.groups:
        o_s, lse_s = _shared_part(pool, layer, qg.index_select(0, members), shared_slots, scaling)
        o_own, lse_own = out.index_select(0, members), lse.index_select(0, members)
        total = torch.logaddexp(lse_own, lse_s)
        merged = (o_own * torch.exp(lse_own - total)[..., None]
                  + o_s * torch.exp(lse_s - total)[..., None])
        out.index_copy_(0, members, merged)
        lse.index_copy_(0, members, total)
    return out.view(b, heads, d).to(q.dtype)


def _shared_part(pool: KVPool, layer: int, qg: torch.Tensor, slots: torch.Tensor,
                 scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's queries against the group's shared K/V in one matmul per KV head."""
    n, kv_heads, rep, d = qg.shape
    k, v = pool.read(layer, slots)  # [m, kv_heads, d]
    queries = qg.permute(1, 0, 2, 3).reshape(kv_heads, n * rep, d)
    scores = torch.matmul(queries, k.float().permute(1, 2, 0)) * scaling  # [kv, n*rep, m]
    top = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - top)
    denom = weights.sum(-1, keepdim=True)
    o = torch.matmul(weights, v.float().transpose(0, 1)) / denom  # [kv, n*rep, d]
    lse = (top + denom.log()).squeeze(-1)
    return (o.view(kv_heads, n, rep, d).permute(1, 0, 2, 3),
            lse.view(kv_heads, n, rep).permute(1, 0, 2))


def _own_padded(pool: KVPool, layer: int, qg: torch.Tensor, plan: DecodePlan,
                scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each request against its own slots, padded to the longest (pad keys masked)."""
    k, v = pool.read(layer, plan.own_slots)  # [B, W, kv_heads, d]
    scores = torch.matmul(qg, k.float().permute(0, 2, 3, 1)) * scaling  # [B, kv, rep, W]
    scores = scores.masked_fill(~plan.own_mask, float("-inf"))
    top = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - top)
    denom = weights.sum(-1, keepdim=True)
    o = torch.matmul(weights, v.float().transpose(1, 2)) / denom  # [B, kv, rep, d]
    return o, (top + denom.log()).squeeze(-1)


def _own_flat(pool: KVPool, layer: int, qg: torch.Tensor, plan: DecodePlan,
              scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each request against its own slots: one flat gather, segment softmax by request."""
    b, kv_heads, rep, d = qg.shape
    k, v = pool.read(layer, plan.own_slots)  # [T, kv_heads, d]
    assert plan.own_req is not None
    idx = plan.own_req
    scores = torch.einsum("tkrd,tkd->tkr", qg.index_select(0, idx), k.float()) * scaling
    top = torch.full((b, kv_heads, rep), float("-inf"), device=qg.device)
    top.scatter_reduce_(0, idx[:, None, None].expand_as(scores), scores, "amax")
    weights = torch.exp(scores - top.index_select(0, idx))  # [T, kv, rep]
    denom = torch.zeros_like(top).index_add_(0, idx, weights)
    o = torch.zeros_like(qg).index_add_(0, idx, weights[..., None] * v.float()[:, :, None, :])
    return o / denom[..., None], top + denom.log()
