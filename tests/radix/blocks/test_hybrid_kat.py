"""Known answers of vLLM 0.33's hybrid cache on the Qwen3.5-4B preset, as vLLM's own code gives
them (tools/diff_vllm_hybrid.py's harness drove vLLM's KVCacheManager, hybrid coordinator and
scheduler split on these workloads and printed these numbers).

64 requests, one at a time, each a shared prefix + its own tokens, prefilled in one step when
the Mamba split allows (budget 8,192), then finished. Block 576 (FlashInfer GDN, an H100's
default): request 1 computes everything and keeps one Mamba state, at 1,728 (the last block
boundary before its 2,200th token: inside its own tokens); request 2 hits 0 (attention matched
1,152 = 2 blocks, Mamba nothing: the intersection is 0), but the uncached common prefix pins
the junction at 1,152, the split ends its first chunk there and the state is cached; from
request 3 on every request hits 1,152. 1,500 + 700: the same 1,152 (2 x 576 <= 1,500).
480 + 100: the first block (576) already holds own tokens: 0 for ever. Block 528 (Triton GDN):
1,584 = 3 x 528 and 1,056 = 2 x 528; 480 + 100 again 0.
"""

from __future__ import annotations

import pytest

from radix.models import VllmOptions, load_preset, vllm_layout
from radix.request import Req


def run(options: VllmOptions, shared: int, unique: int, n: int = 64) -> list[int]:
    layout = vllm_layout(load_preset("qwen3.5-4b"), options)
    m = layout.manager(400, max_in_flight_tokens=8192)
    hits = []
    for r in range(n):
        req = Req(f"r{r}", list(range(shared)) + [10**6 + r * 1000 + i for i in range(unique)])
        m.new_step_starts()
        hit = m.get_computed_blocks(req)
        hits.append(hit.num_computed_tokens)
        first = True
        while m.requests[req.rid].num_computed_tokens < shared + unique:
            done = m.requests[req.rid].num_computed_tokens + (hit.num_computed_tokens if first
                                                               else 0)
            chunk = m.mamba_block_aligned_split(req, min(shared + unique - done, 8192),
                                                hit.num_computed_tokens if first else 0)
            assert m.allocate_slots(req, chunk, hit if first else None, first) is not None
            first = False
            m.new_step_starts()
        m.free(req)
    m.check_invariants()
    return hits


@pytest.mark.parametrize("options, shared, unique, later", [
    (VllmOptions(), 1600, 600, 1152),
    (VllmOptions(), 1500, 700, 1152),
    (VllmOptions(), 480, 100, 0),
    (VllmOptions(gdn_prefill_backend="triton"), 1600, 600, 1584),
    (VllmOptions(gdn_prefill_backend="triton"), 1500, 700, 1056),
    (VllmOptions(gdn_prefill_backend="triton"), 480, 100, 0),
])
def test_qwen35_hits_from_the_junction_on(options, shared, unique, later):
    hits = run(options, shared, unique)
    assert hits[:2] == [0, 0]
    assert set(hits[2:]) == {later}


def test_the_second_request_pins_the_junction_and_cuts_its_chunk_there():
    """Request 2 at block 576: attention alone would hit 1,152, Mamba 0; the 1,152 uncached
    common tokens pin the junction, and the split stops the 2,200-token prefill at it."""
    layout = vllm_layout(load_preset("qwen3.5-4b"))
    m = layout.manager(400)
    for r in range(2):
        req = Req(f"r{r}", list(range(1600)) + [10**6 + r * 1000 + i for i in range(600)])
        hit = m.get_computed_blocks(req)
        chunk = m.mamba_block_aligned_split(req, 2200)
        m.allocate_slots(req, chunk, hit, True)
        if r == 1:
            lookup = m.lookups[-1]
            assert lookup.group_hits == (0, 0, 0, 1152)  # three Mamba groups, then full
            assert (lookup.num_uncached_common_prefix_tokens, lookup.shared_prefix_boundary,
                    chunk) == (1152, 1152, 1152)
        if chunk < 2200:
            m.allocate_slots(req, 2200 - chunk)
        m.free(req)
