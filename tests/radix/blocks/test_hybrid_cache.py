"""vLLM 0.33's hybrid block cache (radix/blocks/kv_cache_manager.py) on the presets' layouts:
sliding-window hits need the whole window, the junction rescues a sliding window too, Mamba
"none" never hits, fine-grained hits copy on write, KV events carry their group, and random
lifecycles keep the invariants. The numbers are derived in each docstring; the differential
tool (tools/diff_vllm_hybrid.py) holds the same code to vLLM's on thousands of lifecycles.
"""

from __future__ import annotations

import random

from radix.blocks.kv_events import EventBatch, decode_batch, encode_batch
from radix.events import BlockRemoved, BlockStored
from radix.models import PRESETS, VllmOptions, load_preset, vllm_layout
from radix.request import Req


def prefill(m, req: Req, hit=None) -> None:
    hit = hit or m.get_computed_blocks(req)
    n = len(req.origin_input_ids) - hit.num_computed_tokens
    assert m.allocate_slots(req, n, hit, True) is not None


def test_a_sliding_window_hit_needs_the_whole_window():
    """gpt-oss-20b: window 128, block 16 -> a hit needs ceil(127/16) = 8 cached blocks before
    its end. A (300 tokens) caches full blocks 0..17 in the full group but, in the window
    group, only the 8 ending on its replay boundary (299 -> 288): blocks 10..17. B = A's first
    200 tokens + its own: full attention alone hits 192, the window group finds 2 blocks before
    192 (10, 11): not a window, so 0 -- and the junction (192) is pinned. B caches the 8 blocks
    before 192, and C, sharing the same 200 tokens, hits 192."""
    m = vllm_layout(load_preset("gpt-oss-20b")).manager(200)
    a = Req("a", list(range(300)))
    prefill(m, a)
    assert [b is m.block_pool.null_block for b in m.coordinator.single_type_managers[0]
            .req_to_blocks["a"]] == [False] * 19  # the window group holds all while running
    m.free(a)
    b = Req("b", list(range(200)) + [999] * 50)
    hit = m.get_computed_blocks(b)
    assert (hit.num_computed_tokens, m.lookups[-1].group_hits) == (0, (0, 192))
    assert hit.shared_prefix_boundary == 192
    prefill(m, b, hit)
    m.free(b)
    c = Req("c", list(range(200)) + [777] * 50)
    hit = m.get_computed_blocks(c)
    assert hit.num_computed_tokens == 192
    window_blocks = hit.blocks[0]  # group 0: the sliding-window layers
    assert [blk.is_null for blk in window_blocks] == [True] * 4 + [False] * 8


def test_mamba_none_mode_never_hits_and_holds_one_state():
    """mamba_cache_mode="none" (prefix caching off): no hit, one Mamba block of max_model_len
    tokens per group, attention blocks of 528 (Triton-sized: no checkpoint grid)."""
    layout = vllm_layout(load_preset("qwen3.5-4b"), VllmOptions(mamba_cache_mode="none"))
    assert (layout.enable_caching, layout.block_size, layout.mamba_block_size) == (False, 528,
                                                                                     32768)
    m = layout.manager(64)
    for rid in ("a", "b"):
        req = Req(rid, list(range(2000)))
        assert m.get_computed_blocks(req).num_computed_tokens == 0
        prefill(m, req)
        assert [len(ids) for ids in m.get_block_ids(rid)] == [1, 1, 1, 4]
        m.free(req)


def test_fine_grained_hits_land_inside_a_block_and_copy_on_write():
    """prefix_match_unit=64: hashes every 64 tokens. A 1,000-token prompt keeps its last hash
    boundary before token 1,000, 960, in the Mamba checkpoint and as a partial entry of its
    second attention block; a replay hits 960 (not a multiple of 576) and its shared tail
    blocks are copied (one copy per group). Not in the step that cached A's states: a Mamba
    state cached this step cannot be hit before the step runs."""
    m = vllm_layout(load_preset("qwen3.5-4b"), VllmOptions(prefix_match_unit=64)).manager(64)
    a = Req("a", list(range(1000)))
    prefill(m, a)
    m.free(a)
    b = Req("b", list(range(1000)))
    hit = m.get_computed_blocks(b)
    assert hit.num_computed_tokens == 960
    assert m.allocate_slots(b, 40, hit, True) is None  # same step: not yet
    m.new_step_starts()
    assert m.allocate_slots(b, 40, hit, True) is not None
    copies, held = m.take_kv_cache_block_copies()
    assert len(copies) == 4 and len(held) == 8
    m.block_pool.free_blocks(held)
    m.check_invariants()


def test_kv_events_carry_their_group_kind_and_window_through_the_wire():
    """gpt-oss: group 0 is the window (128), group 1 full attention; a BlockRemoved names the
    group of the key it drops; the batch survives vLLM's wire format."""
    m = vllm_layout(load_preset("gpt-oss-20b")).manager(12, enable_kv_cache_events=True)
    for rid in ("a", "b"):  # b evicts a's cached blocks
        req = Req(rid, [ord(rid)] * 80)
        prefill(m, req)
        m.free(req)
    events = m.take_events()
    stored = [e for e in events if type(e) is BlockStored]
    assert {(e.group_idx, e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window)
            for e in stored} == {(0, "sliding_window", 128), (1, "full_attention", None)}
    assert {e.group_idx for e in events if type(e) is BlockRemoved} == {0, 1}
    batch = EventBatch(1.0, tuple(events))
    assert decode_batch(encode_batch(batch)) == batch


def test_random_lifecycles_keep_the_invariants_on_every_preset():
    """Admit, chunk (the Mamba split), decode, finish, preempt on each preset's layout in a
    small pool; after every call refs == the tables holding them, the queue holds exactly the
    free blocks, every key maps to the blocks carrying it."""
    rng = random.Random(7)
    for name in PRESETS:
        layout = vllm_layout(load_preset(name))
        m = layout.manager(6 * len(layout.groups) + 4)
        prefix = list(range(2 * layout.block_size))
        live: dict[str, Req] = {}
        for i in range(24):
            if not live or rng.random() < 0.4:
                req = Req(f"r{i}", prefix[:rng.randrange(len(prefix))]
                          + [10**6 + i] * rng.randrange(1, layout.block_size))
                hit = m.get_computed_blocks(req)
                n = m.mamba_block_aligned_split(req, len(req.origin_input_ids)
                                                - hit.num_computed_tokens,
                                                hit.num_computed_tokens)
                if (n or hit.num_computed_tokens) and m.allocate_slots(req, n, hit, True):
                    live[req.rid] = req
            else:
                req = live[rng.choice(sorted(live))]
                state = m.requests[req.rid]
                if state.num_computed_tokens == state.num_tokens:
                    req.output_ids.append(rng.randrange(50))
                n = m.mamba_block_aligned_split(req, state.num_tokens - state.num_computed_tokens)
                if rng.random() < 0.3 or (n and m.allocate_slots(req, n) is None):
                    m.free(live.pop(req.rid))
            m.check_invariants()
        for req in live.values():
            m.free(req)
        m.check_invariants()
        assert m.block_pool.get_num_free_blocks() == m.block_pool.num_gpu_blocks - 1, name


def test_every_call_is_a_step_of_events():
    """With a sink, a lookup says how each group saw the prompt, and each allocate/free is one
    step holding the pool's micro-events and the block tables it changed."""
    from radix.blocks.kv_cache_manager import BlockTableChanged, HybridLookedUp
    from radix.events import BlockAllocated, ListSink, StepEnded, StepStarted

    sink = ListSink()
    m = vllm_layout(load_preset("gpt-oss-20b")).manager(32, sink=sink)
    req = Req("a", list(range(40)))
    prefill(m, req)
    m.free(req)
    kinds = [type(e) for e in sink.events]
    assert kinds[0] is HybridLookedUp and kinds.count(StepStarted) == kinds.count(StepEnded) == 2
    assert BlockAllocated in kinds and BlockStored in kinds
    tables = [e for e in sink.events if type(e) is BlockTableChanged]
    assert [(e.group_idx, len(e.block_ids)) for e in tables] == [(0, 3), (1, 3), (0, 0), (1, 0)]
