"""A vLLM KV-event recording beside a replay of the same requests (radix/runs/recording.py)."""

from __future__ import annotations

from pathlib import Path

from radix.blocks.kv_events import EventBatch, encode_batch
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.cli import main
from radix.runs.recording import match_recording
from radix.traces import load_trace, to_req

TRACES = Path(__file__).resolve().parents[3] / "examples" / "traces"


def _record(trace, block_size: int = 16) -> list[EventBatch]:
    """What vLLM would publish for the trace, one batch per request: the block cache hashing
    as vLLM does (its events are checked byte for byte against vLLM's by tools/diff_vllm.py)."""
    pool = BlockPool(4096, block_size, enable_kv_cache_events=True, hash_algo="vllm-sha256")
    manager, batches = BlockCacheManager(pool), []
    for i, tr in enumerate(trace.requests):
        req = to_req(tr)
        hit = manager.get_computed_blocks(req)
        manager.allocate_slots(req, len(tr.token_ids) - hit.num_computed_tokens, hit)
        manager.free(req)
        batches.append(EventBatch(float(i), tuple(manager.take_events()), 0))
    return batches


def test_a_recording_of_the_same_requests_matches_every_hash():
    trace = load_trace(TRACES / "three_requests.jsonl.gz")
    match = match_recording(trace, _record(trace))
    assert match.num_recorded > 0 and match.num_matched == match.num_recorded
    assert match.first_missing is None and match.match_rate == 1.0
    assert "every recorded hash" in match.summary()


def test_the_first_differing_block_is_named():
    """Change token 40 of the second request in the replayed trace: its hashes differ from
    block 2 on. The recording's batch 1 stored only R2's blocks past its 128-block hit on R1, so
    the first missing block is the first one batch 1 stored: tokens 128 * 16 .. 129 * 16."""
    trace = load_trace(TRACES / "three_requests.jsonl.gz")
    recording = _record(trace)
    second = trace.requests[1]
    changed = list(second.token_ids)
    changed[40] += 1  # block 2 of 16 onwards differs
    trace.requests[1] = type(second)(second.rid, second.arrival, tuple(changed), second.output_len)
    match = match_recording(trace, recording)
    assert match.num_matched < match.num_recorded
    assert match.first_missing.batch_index == 1
    assert match.first_missing.token_ids == tuple(second.token_ids[2048:2064])
    assert match.first_missing.block_hash == recording[1].events[0].block_hashes[0]
    assert match.first_extra is not None


def test_cli_compare_with_kv_events(tmp_path, capsys):
    trace_path = TRACES / "three_requests.jsonl.gz"
    rec = tmp_path / "rec.msgpack"
    rec.write_bytes(b"".join(encode_batch(b) for b in _record(load_trace(trace_path))))
    assert main(["compare", str(trace_path), "--kv-events", str(rec)]) == 0
    out = capsys.readouterr().out
    assert "(100.0%)" in out and "every recorded hash" in out
    assert main(["compare", str(trace_path), "--kv-events", str(rec), "--hash", "radixlens"]) == 0
    assert "stores 0 of them" in capsys.readouterr().out  # a different hash function


def test_the_trace_pages_verdict_comes_from_the_scenario():
    """The Trace debugger's recording panel (scenarios/kvrecording.py recording_verdict): the
    same requests' recording matches every hash ("success"); the same bytes hashed with
    radixlens's own hash match none ("warning" with the hint); the trace itself uploaded as a
    recording is an error naming what it is."""
    from scenarios.kvrecording import recording_verdict

    trace_path = TRACES / "three_requests.jsonl.gz"
    trace = load_trace(trace_path)
    data = b"".join(encode_batch(b) for b in _record(trace))
    level, text = recording_verdict(trace, data, "vllm-sha256")
    assert level == "success" and "every recorded hash" in text
    level, text = recording_verdict(trace, data, "radixlens")
    assert level == "warning" and "None match" in text
    level, text = recording_verdict(trace, trace_path.read_bytes(), "vllm-sha256")
    assert level == "error" and "not a KV-event recording" in text
