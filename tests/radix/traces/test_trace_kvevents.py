"""KV-event recordings: both renderings load to the same batches, and the block view rebuilt from
them (radix/watch/view.py's WorkerCache, the one replay of KV events) is exactly the block
pool's cached set at the end of the recorded run."""

from __future__ import annotations

from pathlib import Path

from examples.generate import kv_event_recording
from examples.workloads import three_requests
from radix.blocks.hashing import hash_to_int64
from radix.blocks.kv_events import EventBatch, encode_batch
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import AllBlocksCleared, BlockRemoved, BlockStored
from radix.traces import load_trace, to_req
from radix.watch.view import WorkerCache

TRACES = Path(__file__).resolve().parents[3] / "examples" / "traces"


def test_msgpack_and_json_lines_agree():
    packed, lines = load_trace(TRACES / "kv_events.msgpack"), load_trace(TRACES / "kv_events.jsonl")
    assert packed.format == lines.format == "kv_events"
    assert packed.batches == lines.batches
    assert packed.batches == kv_event_recording(three_requests())


def test_block_view_equals_the_pools_cache():
    """The three-request walk on a 250-block pool (249 usable blocks of 16 tokens):
    R1 (2,151 tokens) takes 135 blocks and stores its 134 full ones; R2 (2,135) hits 128, takes 6
    and stores 133 - 128 = 5; R3 (2,624 = 164 full blocks) hits S's 32, takes 132 and stores 132.
    Stored: 134 + 5 + 132 = 271. R3's 132 come first from unhashed blocks: 249 - 141 = 108 never
    used plus R1's and R2's partial last blocks; the other 22 evict cached hashes: 22 removed,
    271 - 22 = 249 cached. The view must hold exactly the pool's cached hashes."""
    pool = BlockPool(250, 16)
    manager = BlockCacheManager(pool)
    for tr in three_requests():
        req = to_req(tr)
        hit = manager.get_computed_blocks(req)
        manager.allocate_slots(req, len(tr.token_ids) - hit.num_computed_tokens, hit)
        manager.free(req)
    view = WorkerCache.of(load_trace(TRACES / "kv_events.msgpack").batches)
    assert set(view.blocks) == {hash_to_int64(h) for h in pool.cached_block_hash_to_block}
    assert (view.num_stored, view.num_removed, len(view.blocks)) == (271, 22, 249)
    assert view.unreachable() == [] and view.unknown_removed == 0


def test_view_chains_removal_and_clear():
    """Two chains a->b->c and x; removing b strands c (unreachable); a clear empties all."""
    s1 = BlockStored((1, 2, 3), None, (10, 11, 12, 13, 14, 15), 2, None, "GPU", None)
    s2 = BlockStored((9,), None, (7, 7), 2, None, "GPU", None)
    batches = [EventBatch(0.0, (s1, s2)), EventBatch(1.0, (BlockRemoved((2, 99), "GPU"),))]
    view = WorkerCache.of(batches)
    assert sorted(view.blocks) == [1, 3, 9]
    assert view.blocks[3].parent_block_hash == 2 and view.blocks[3].token_ids == (14, 15)
    assert view.unreachable() == [3] and view.unknown_removed == 1  # 99: never stored
    view = WorkerCache.of(batches + [EventBatch(2.0, (AllBlocksCleared(),))])
    assert view.blocks == {} and view.num_cleared == 1


def test_medium_filter_and_duplicate_hashes():
    """A hash stored twice on GPU stays until removed twice; CPU events are skipped for GPU."""
    gpu = BlockStored((5,), None, (1, 2), 2, None, "GPU", None)
    cpu = BlockStored((6,), None, (3, 4), 2, None, "CPU", None)
    one_removal = [EventBatch(0.0, (gpu, gpu, cpu, BlockRemoved((5,), "GPU")))]
    assert sorted(WorkerCache.of(one_removal, medium="GPU").blocks) == [5]
    assert sorted(WorkerCache.of(one_removal).blocks) == [5, 6]


def test_wire_array_json_lines_load():
    """A JSON line may be the wire array [ts, events, dp_rank] itself."""
    data = b'[1.5, [{"type": "BlockRemoved", "block_hashes": [4], "medium": "GPU"}], 0]\n'
    batch = load_trace(data).batches[0]
    assert batch == EventBatch(1.5, (BlockRemoved((4,), "GPU"),), 0)
    assert load_trace(encode_batch(batch)).batches == [batch]
