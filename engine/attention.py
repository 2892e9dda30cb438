"""Attention of new tokens over KV pool slots: one path for prefill and decode (spans of n >= 1).

Each request brings a span of new tokens at the end of its slots (a decode step is a span of one).
The radix tree dedups a shared prefix, so requests that share it hold the very same slot ids: a
forward groups such requests, gathers each group's shared K/V once per layer and attends all the
members' queries to it in one matmul; each request then attends causally to its own remaining KV
(padded in buckets, or one flat gather for spans of one), and the two partial softmaxes merge
exactly by log-sum-exp. This follows FlashInfer's cascade attention and vLLM's
use_cascade_attention / merge_attn_states, with one level per group chosen by a gather-cost model.
Leaves out: multi-level cascades, fused kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
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
    if len(slot_lists) < 2:  # nothing to share (a prefill whose spans are all too long to group)
        return []
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


class Bucket(NamedTuple):
    """Requests whose own parts run as one padded batch: R requests, N queries, W own keys."""

    span: tuple[int, int] | None  # query rows lo..hi when they are the bucket's, in order, unpadded
    rows: torch.Tensor | None  # else [R*N] the query row of each (request, position); pads repeat
    keep: torch.Tensor | None  # [k] the real positions of `rows` (None with span)
    slots: torch.Tensor  # [R, W] own slots (pad slot 0)
    mask: torch.Tensor  # [R, 1, N, W] True where a query sees a key (causal, pads out)


class SpanPlan(NamedTuple):
    """Index tensors of one forward, shared by every layer: the shared parts and the own parts."""

    groups: list[tuple[torch.Tensor, torch.Tensor]]  # (members' query rows [r], shared slots [m])
    buckets: list[Bucket]  # padded own parts (none when `flat`)
    flat: tuple[torch.Tensor, torch.Tensor] | None  # spans of one: own slots [T], row of each [T]


# a longer span is compute-bound: its queries already share each gathered key, and the fused SDPA
# beats the fp32 log-sum-exp merge (8 prefills of 64 tokens after a shared 512 on CPU: +20% grouped)
MAX_GROUP_SPAN = 1
PADDED_WASTE = 3  # pad when B x N x W <= this x the real (query, key) pairs: a padded pair costs
#                   ~1/3 of a flat one (matmul)


def plan_spans(slot_lists: Sequence[Sequence[int]], start_pos: Sequence[int],
               device: torch.device, min_shared: int = MIN_SHARED_LEN,
               padded: bool | None = None, max_group_span: int = MAX_GROUP_SPAN,
               window: int | None = None) -> SpanPlan:
    """Request b's new tokens sit at positions start_pos[b].. of slot_lists[b] (a decode step: a
    span of one, start_pos = len - 1). Groups share leading slots that every new token of every
    member sees (at most start_pos); only spans of at most `max_group_span` tokens join a group
    (decode steps, by default). `padded` True: one padded batch; False: flat (all spans of
    one) or one padded batch per request; None picks the cheaper. `window` W (a sliding
    layer): the new token at index i sees slots i - W + 1 .. i only; the caller passes lists
    that start no earlier than the first new token's window (then a span of one sees them all).

    Two prefills of 3 tokens after 100 shared prefix slots: one group reads the 100 once for all
    6 query rows (64 + 100 + 2 x 1 = 166 < 2 x 101 gathered, the cost model counts each span's
    first token); each own part is its 3 new slots, under a causal 3 x 3 mask.
    >>> shared = list(range(1, 101))
    >>> p = plan_spans([shared + [130, 131, 132], shared + [140, 141, 142]], [100, 100], "cpu",
    ...                max_group_span=3)
    >>> [(r.tolist(), len(s)) for r, s in p.groups], p.buckets[0].mask[0, 0].int().tolist()
    ([([0, 1, 2, 3, 4, 5], 100)], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    """
    lens = [len(sl) - p for sl, p in zip(slot_lists, start_pos)]
    if not lens or min(lens) < 1:
        raise ValueError(f"every request needs >= 1 new token, got {lens}")
    if window is not None:
        if any(p >= window for p in start_pos):
            raise ValueError(f"a sliding layer's lists start inside the first new token's window "
                             f"of {window}, got start_pos {list(start_pos)}")
        max_group_span = 1  # a longer span's later tokens would not see all the shared slots
    offsets = [0, *accumulate(lens)]
    shared_len, groups = [0] * len(lens), []
    eligible = [b for b, n in enumerate(lens) if n <= max_group_span]
    heads = [slot_lists[b] if lens[b] == 1 else slot_lists[b][:start_pos[b] + 1] for b in eligible]
    for g in shared_prefix_groups(heads, min_shared):  # slots every new token sees (and one)
        members = [eligible[i] for i in g.members]
        rows = [t for i in members for t in range(offsets[i], offsets[i + 1])]
        for i in members:
            shared_len[i] = g.shared_len
        groups.append((torch.tensor(rows, device=device),
                       torch.tensor(list(slot_lists[members[0]][:g.shared_len]),
                                    device=device)))
    own = [list(sl[n:]) for sl, n in zip(slot_lists, shared_len)]
    pairs = sum(n * len(o) for n, o in zip(lens, own))
    if padded is None:
        padded = len(own) * max(lens) * max(len(o) for o in own) <= PADDED_WASTE * pairs
    if not padded and max(lens) == 1:
        req = [b for b, o in enumerate(own) for _ in o]
        flat = [s for o in own for s in o]
        return SpanPlan(groups, [], (torch.tensor(flat, device=device),
                                     torch.tensor(req, device=device)))
    view = (lens, offsets, [p - n for p, n in zip(start_pos, shared_len)], own)
    members = [list(range(len(lens)))] if padded else [[b] for b in range(len(lens))]
    return SpanPlan(groups, [_bucket(m, view, device, window) for m in members], None)


def _bucket(members: list[int], view: tuple, device: torch.device,
            window: int | None = None) -> Bucket:
    lens, offsets, own_start, own = view  # own_start: the first new token's index in own[b]
    n, w = max(lens[b] for b in members), max(len(own[b]) for b in members)
    slots = torch.tensor([own[b] + [0] * (w - len(own[b])) for b in members], device=device)
    size = [[len(own[b]), own_start[b], lens[b]] for b in members]
    own_len, first, num_new = torch.tensor(size, device=device).T[:, :, None, None]
    j = torch.arange(n, device=device)[None, :, None]
    k = torch.arange(w, device=device)[None, None, :]
    sees = k <= first + j
    if window is not None:
        sees = sees & (k > first + j - window)
    mask = (k < own_len) & (sees | (j >= num_new))  # a pad query sees every key
    lo, hi = offsets[members[0]], offsets[members[-1] + 1]
    if all(lens[b] == n for b in members) and hi - lo == n * len(members):
        return Bucket((lo, hi), None, None, slots, mask[:, None])
    rows = [offsets[b] + min(i, lens[b] - 1) for b in members for i in range(n)]
    keep = [r * n + i for r, b in enumerate(members) for i in range(lens[b])]
    return Bucket(None, torch.tensor(rows, device=device), torch.tensor(keep, device=device),
                  slots, mask[:, None])


def attend(pool: KVPool, layer: int, q: torch.Tensor, plan: SpanPlan,
           scaling: float) -> torch.Tensor:
    """The new tokens of every span, q [T, heads, d] (spans in order) -> [T, heads, d].

    With no group and padded buckets this is fused SDPA per bucket in q's dtype; otherwise the
    softmax runs in fp32 whatever the pool's dtype (the parts merge by log-sum-exp), and the
    output has q's dtype.
    """
    t, heads, d = q.shape
    if not plan.groups and plan.flat is None:  # nothing shared: fused SDPA, no LSE needed
        if len(plan.buckets) == 1 and plan.buckets[0].span == (0, t):
            return _sdpa(pool, layer, q, plan.buckets[0], scaling)
        out = torch.empty_like(q)
        for bucket in plan.buckets:
            _put(out, bucket, _sdpa(pool, layer, q, bucket, scaling))
        return out
    kv_heads = pool.num_kv_heads
    qg = q.float().view(t, kv_heads, heads // kv_heads, d)
    if plan.flat is not None:
        out, lse = _own_flat(pool, layer, qg, plan.flat, scaling)
    else:
        out, lse = torch.empty_like(qg), qg.new_empty(qg.shape[:3])
        for bucket in plan.buckets:
            o, lse_b = _own_padded(pool, layer, qg, bucket, scaling)
            _put(out, bucket, o)
            _put(lse, bucket, lse_b)
    for rows, shared_slots in plan.groups:
        o_s, lse_s = _shared_part(pool, layer, qg.index_select(0, rows), shared_slots, scaling)
        o_own, lse_own = out.index_select(0, rows), lse.index_select(0, rows)
        total = torch.logaddexp(lse_own, lse_s)
        merged = (o_own * torch.exp(lse_own - total)[..., None]
                  + o_s * torch.exp(lse_s - total)[..., None])
        out.index_copy_(0, rows, merged)
        lse.index_copy_(0, rows, total)
    return out.view(t, heads, d).to(q.dtype)


def _take(x: torch.Tensor, bucket: Bucket) -> torch.Tensor:
    """The bucket's query rows of x [T, ...] as [R, N, ...]."""
    r, n = bucket.mask.shape[0], bucket.mask.shape[2]
    part = x[bucket.span[0]:bucket.span[1]] if bucket.span else x.index_select(0, bucket.rows)
    return part.view(r, n, *x.shape[1:])


def _put(out: torch.Tensor, bucket: Bucket, part: torch.Tensor) -> None:
    """Writes a bucket's result part [R * N, ...] back to its rows of out [T, ...]."""
    if bucket.span:
        out[bucket.span[0]:bucket.span[1]] = part
    else:
        keep = bucket.keep
        out.index_copy_(0, bucket.rows.index_select(0, keep), part.index_select(0, keep))


def _sdpa(pool: KVPool, layer: int, q: torch.Tensor, bucket: Bucket,
          scaling: float) -> torch.Tensor:
    """Fused SDPA of one bucket against its own slots -> [R * N, heads, d]."""
    qb = _take(q, bucket)  # [R, N, heads, d]
    k, v = pool.read(layer, bucket.slots)  # [R, W, kv_heads, d]
    o = F.scaled_dot_product_attention(
        qb.transpose(1, 2), k.transpose(1, 2).to(q.dtype), v.transpose(1, 2).to(q.dtype),
        attn_mask=bucket.mask, scale=scaling, enable_gqa=True)  # [R, heads, N, d]
    return o.transpose(1, 2).reshape(-1, *q.shape[1:])


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


def _own_padded(pool: KVPool, layer: int, qg: torch.Tensor, bucket: Bucket,
                scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One bucket's queries against their own slots, padded (pad keys masked), with the LSE:
    -> [R * N, kv, rep, d], [R * N, kv, rep]."""
    qb = _take(qg, bucket)  # [R, N, kv, rep, d]
    r, n, kv_heads, rep, d = qb.shape
    k, v = pool.read(layer, bucket.slots)  # [R, W, kv_heads, d]
    queries = qb.permute(0, 2, 1, 3, 4).reshape(r, kv_heads, n * rep, d)
    scores = torch.matmul(queries, k.float().permute(0, 2, 3, 1)) * scaling  # [R, kv, N*rep, W]
    w = scores.shape[-1]
    scores = scores.view(r, kv_heads, n, rep, w).masked_fill(
        ~bucket.mask[:, :, :, None, :], float("-inf"))
    top = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - top)
    denom = weights.sum(-1, keepdim=True)
    o = torch.matmul(weights.view(r, kv_heads, n * rep, w), v.float().transpose(1, 2))
    o = o.view(r, kv_heads, n, rep, d) / denom
    lse = (top + denom.log()).squeeze(-1)  # [R, kv, N, rep]
    return (o.permute(0, 2, 1, 3, 4).reshape(r * n, kv_heads, rep, d),
            lse.permute(0, 2, 1, 3).reshape(r * n, kv_heads, rep))


def _own_flat(pool: KVPool, layer: int, qg: torch.Tensor, flat: tuple[torch.Tensor, torch.Tensor],
              scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Spans of one against their own slots: one flat gather, segment softmax by query row."""
    t, kv_heads, rep, d = qg.shape
    slots, idx = flat
    k, v = pool.read(layer, slots)  # [S, kv_heads, d]
    scores = torch.einsum("tkrd,tkd->tkr", qg.index_select(0, idx), k.float()) * scaling
    top = torch.full((t, kv_heads, rep), float("-inf"), device=qg.device)
    top.scatter_reduce_(0, idx[:, None, None].expand_as(scores), scores, "amax")
    weights = torch.exp(scores - top.index_select(0, idx))  # [S, kv, rep]
    denom = torch.zeros_like(top).index_add_(0, idx, weights)
    o = torch.zeros_like(qg).index_add_(0, idx, weights[..., None] * v.float()[:, :, None, :])
    return o / denom[..., None], top + denom.log()
