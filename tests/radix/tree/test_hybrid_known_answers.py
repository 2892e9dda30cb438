"""Known answers for hybrid models, taken from SGLang 0.5.23's own code: the same runs on its
UnifiedRadixCache (both TreeCores, its pools on CPU) print the same hits
(`python tools/known_sglang_hybrid.py /tmp/sgl/ex`; docs/HYBRID.md, "SGLang 0.5.23")."""

from __future__ import annotations

import pytest

from radix.request import Req, SlotAllocator
from radix.tree.components.base import SWA
from radix.tree.hybrid_lifecycle import SchedulerKnobs, serve
from radix.tree.hybrid_pools import MambaSlotPool, SWASlotAllocator
from radix.tree.unified_radix_cache import UnifiedRadixCache


def qwen35_hits(shared: int, unique: int, extra_buffer: bool, n: int = 64) -> list[int]:
    """Qwen3.5's shape as SGLang caches it: FULL + MAMBA (the 3 linear-attention layers' state),
    the GDN chunk of 64 tokens, page 1; the overlap scheduler on for extra_buffer (SGLang's
    default on CUDA), off for no_buffer (which SGLang then requires)."""
    cache = UnifiedRadixCache(("full", "mamba"), mamba_chunk_size=64,
                              enable_mamba_extra_buffer=extra_buffer,
                              allocator=SlotAllocator(200_000), mamba_pool=MambaSlotPool(300))
    knobs = SchedulerKnobs(enable_overlap_schedule=extra_buffer)
    return [serve(cache, Req(f"r{i}", list(range(shared)) +
                             [10**6 + i * 10_000 + j for j in range(unique)], max_new_tokens=1),
                  knobs)
            for i in range(n)]


@pytest.mark.parametrize("shared,unique,hit", [(1600, 600, 1600), (1500, 700, 1472),
                                               (480, 100, 448)])
def test_qwen35_extra_buffer_hits_from_the_third_request_on(shared, unique, hit):
    """extra_buffer keeps states on the 64-token grid. Request 1 (2,200 tokens) keeps one at
    2,176 = 34 * 64 and caches [0, 2,176) with it. Request 2 shares `shared` tokens: FULL
    matches them but the node there has no state (the state sits at 2,176), so it hits 0;
    the match reports mamba_branching_seqlen = floor(shared / 64) * 64 (1,600; 1,472;
    448), request 2 keeps its state there and caches it. From request 3 on every request hits
    that far. (The public report's "from the second request on" is one request early.)"""
    hits = qwen35_hits(shared, unique, True)
    assert hits[:2] == [0, 0]
    assert set(hits[2:]) == {hit}


def test_qwen35_no_buffer_never_hits():
    """no_buffer keeps only the state at the end of what a finished request caches: its
    unique tail. The shared prefix's node never gets a state, so every request hits 0."""
    for shared, unique in [(1600, 600), (1500, 700), (480, 100)]:
        assert set(qwen35_hits(shared, unique, False, n=8)) == {0}


@pytest.mark.parametrize("w", [128, 1024])
def test_swa_tombstone_keeps_the_hit_and_an_insert_recovers_the_window(w):
    """FULL + SWA, window w (gpt-oss 128, Gemma 3 1,024), prompt P of 8w tokens.

      A caches P: a new leaf is capped at one window, so [0, 7w) + [7w, 8w), both with SWA.
      evict(swa_num_tokens=1): SWA's LRU tail is [0, 7w), inside the tree: tombstoned (7w
        SWA slots freed, FULL kept).
      B = P + 64 tokens hits all 8w: the window before 8w is still live.
      C = P[:4w] + 64 hits 0: the match splits [0, 7w) at 4w, a tombstone. C's first
        checkpoint frees its own SWA slots below 4w - 1 - w, inserts up to the branch point
        4w and recovers the tombstone's live part [3w - 1, 4w) from its own slots.
      D = P[:4w] + 64 others hits 4w: w + 1 tokens of SWA behind 4w.
    """
    n = 8 * w
    cache = UnifiedRadixCache(("full", "swa"), sliding_window_size=w,
                              allocator=SWASlotAllocator(4 * n, 4 * n))
    knobs, p = SchedulerKnobs(), list(range(n))
    hits = [serve(cache, Req("A", p, max_new_tokens=1), knobs)]
    assert cache.evict(swa_num_tokens=1).swa_num_tokens_evicted == 7 * w
    hits.append(serve(cache, Req("B", p + [10**6 + j for j in range(64)], max_new_tokens=1),
                      knobs))
    c = Req("C", p[: n // 2] + [2 * 10**6 + j for j in range(64)], max_new_tokens=2)
    hits.append(serve(cache, c, knobs))
    spans = _swa_spans(cache, p[: n // 2])
    hits.append(serve(cache, Req("D", p[: n // 2] + [3 * 10**6 + j for j in range(64)],
                                 max_new_tokens=1), knobs))
    assert hits == [0, n, 0, n // 2]
    assert spans == [(0, 3 * w - 1, False), (3 * w - 1, 4 * w, True)]
    cache.check_invariants()


def _swa_spans(cache, ids: list[int]) -> list[tuple[int, int, bool]]:
    """(start, end, has SWA) of the nodes along ids's path."""
    out, node, pos = [], cache.root_node, 0
    while pos < len(ids):
        node = node.children[ids[pos]]
        out.append((pos, pos + len(node.key), node.component_data[SWA].value is not None))
        pos += len(node.key)
    return out
