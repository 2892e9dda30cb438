"""The subscriber over real ZMQ sockets, against engine/kv_publisher.py (no model needed).

Faults: a late subscriber (replay catch-up), a batch lost on purpose (repaired from the replay
buffer, or marked lost when the buffer no longer holds it), a publisher restarted on the same
ports, malformed frames (counted, never fatal); a recording read back into the same views; the
`python -m radix watch` command. Sockets bind port 0 on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from machine import seconds

from engine.kv_publisher import ZmqEventPublisher
from radix.blocks.kv_events import EventBatch
from radix.events import AllBlocksCleared, BlockRemoved, BlockStored
from radix.traces import load_trace
from radix.traces.kv_events import load_kv_events
from radix.watch.recording import Recorder, read_recording, replay_recording
from radix.watch.subscriber import Endpoint, Watcher, parse_endpoint
from radix.watch.view import WorkerCache
from radix.watch.wire import seq_bytes

ROOT = Path(__file__).resolve().parents[3]
LOCAL = "tcp://*:0"  # a wildcard binds (vLLM: other hosts are connected to)


def stored(h: int, parent: int | None) -> EventBatch:
    return EventBatch(float(h), (BlockStored((h,), parent, (h, h), 2, None, "GPU", None),))


def chain(first: int, n: int) -> list[EventBatch]:
    return [stored(h, h - 1 if h > first else None) for h in range(first, first + n)]


class LossyPublisher(ZmqEventPublisher):
    """Loses the PUB message of each seq in `drop` (it stays in the replay buffer)."""

    drop: set[int] = set()

    def _send(self, seq: int, payload: bytes) -> None:
        if seq not in self.drop:
            super()._send(seq, payload)


def _endpoint(pub: ZmqEventPublisher) -> Endpoint:
    return parse_endpoint(f"{pub.endpoint},{pub.replay_endpoint}")


def wait_for(watcher: Watcher, done, timeout: float | None = None) -> None:
    end = time.monotonic() + (timeout or seconds(20))
    while not done():
        assert time.monotonic() < end, f"timed out: {watcher.status()}"
        watcher.poll(0.05)


def warm_up(watcher: Watcher, pub: ZmqEventPublisher) -> int:
    """Publishes AllBlocksCleared until one arrives live, so the subscription is up (a PUB
    drops what it sends before a subscription reaches it: ZMQ's slow joiner); the clear leaves
    the view exact. Returns the seq the scenario starts at."""
    deadline = time.monotonic() + seconds(20)
    while watcher.streams[0].last_live is None:
        assert time.monotonic() < deadline, "the subscription never came up"
        pub.publish(EventBatch(0.0, (AllBlocksCleared(),)))
        for _ in range(4):
            watcher.poll(0.05)
    wait_for(watcher, lambda: watcher.status()[0].next_seq == pub.num_published)
    return pub.num_published


def wait_sent(pub: ZmqEventPublisher, n: int, timeout: float | None = None) -> None:
    end = time.monotonic() + (timeout or seconds(10))
    while pub.num_published < n:
        assert time.monotonic() < end, "the publisher did not send"
        time.sleep(0.01)


@pytest.fixture
def publisher():
    pubs = []

    def make(cls=ZmqEventPublisher, endpoint=LOCAL, replay=LOCAL, **kw):
        pub = cls(0, endpoint, replay, **kw)
        pubs.append(pub)
        return pub
    yield make
    for p in pubs:
        p.close()


def test_a_late_subscriber_catches_up_then_follows_live(publisher):
    """8 batches before it subscribes (replayed), 4 after (live): 12 blocks, exact."""
    pub = publisher()
    batches = chain(1, 12)
    for b in batches[:8]:
        pub.publish(b)
    wait_sent(pub, 8)
    with Watcher([_endpoint(pub)], replay_timeout=seconds(5)) as w:
        w.poll(0.05)
        assert w.status()[0].replayed == 8
        for b in batches[8:]:
            pub.publish(b)
        wait_for(w, lambda: w.status()[0].next_seq == 12)
        s = w.status()[0]
        assert (s.blocks, s.incomplete_since, s.lost, s.rank) == (12, None, 0, 0)
        truth = WorkerCache.of(batches)
        assert set(w.streams[0].cache.blocks) == set(truth.blocks)


def test_a_batch_dropped_on_purpose_is_repaired_through_replay(publisher):
    pub = publisher(LossyPublisher)
    with Watcher([_endpoint(pub)], replay_timeout=seconds(5)) as w:
        first = warm_up(w, pub)
        pub.drop = {first + 3}
        for b in chain(1, 6):
            pub.publish(b)
        wait_for(w, lambda: w.status()[0].next_seq == first + 6)
        s = w.status()[0]
        assert s.gaps == 1 and s.incomplete_since is None and s.blocks == 6


def test_a_dropped_batch_gone_from_the_buffer_is_marked_lost(publisher):
    """buffer_steps=1: when the batch after it reveals the gap, the buffer holds only that
    one: the dropped seq is lost, and the view says so instead of showing 5 blocks as exact."""
    pub = publisher(LossyPublisher, buffer_steps=1)
    with Watcher([_endpoint(pub)], replay_timeout=seconds(5)) as w:
        first = warm_up(w, pub)
        lost_before = w.status()[0].lost
        pub.drop = {first + 3}
        for b in chain(1, 5):
            pub.publish(b)
        wait_for(w, lambda: w.status()[0].next_seq == first + 5)
        s = w.status()[0]
        assert (s.incomplete_since, s.lost - lost_before, s.blocks) == (first + 3, 1, 4)


def test_a_restarted_publisher_is_followed_from_scratch(publisher):
    """Publisher A sends blocks 1..5 and closes; B binds the same ports (an engine restarted,
    its cache empty), sends blocks 100..102 from seq 0, then empty batches until the watcher
    has reconnected: the seq went back, so the view holds only B's blocks, caught up by
    replay from B's seq 0."""
    a = publisher()
    endpoint = _endpoint(a)
    with Watcher([endpoint], replay_timeout=seconds(5)) as w:
        warm_up(w, a)
        for b in chain(1, 5):
            a.publish(b)
        wait_for(w, lambda: w.status()[0].blocks == 5)
        a.close()
        b = publisher(endpoint=a.endpoint, replay=a.replay_endpoint)
        for batch in chain(100, 3):
            b.publish(batch)
        deadline = time.monotonic() + seconds(20)
        while w.status()[0].restarts == 0:
            assert time.monotonic() < deadline, w.status()
            b.publish(EventBatch(1.0, ()))
            w.poll(0.1)
        wait_for(w, lambda: w.status()[0].next_seq == b.num_published)
        assert sorted(w.streams[0].cache.blocks) == [100, 101, 102]
        assert w.status()[0].incomplete_since is None


def test_malformed_frames_are_counted_and_never_fatal():
    """A raw PUB socket sends a 2-frame message, a 5-byte seq and a payload that is not
    msgpack, then a good batch: three malformed, the good one applied (seq 2 lost: its
    payload was unreadable)."""
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    from radix.blocks.kv_events import encode_batch
    good = encode_batch(stored(1, None))
    with Watcher([Endpoint(f"tcp://127.0.0.1:{port}", None)], replay_timeout=1) as w:
        w.poll(0.05)
        deadline = time.monotonic() + seconds(20)
        while w.status()[0].next_seq is None:  # resend until the subscription is up
            assert time.monotonic() < deadline, w.status()
            pub.send_multipart([b"", seq_bytes(0), good])
            w.poll(0.1)
        pub.send_multipart([b"", b"\x00"])
        pub.send_multipart([b"", b"\x00" * 5, good])
        pub.send_multipart([b"", seq_bytes(1), b"\xc1 junk"])
        pub.send_multipart([b"", seq_bytes(2), good])
        wait_for(w, lambda: w.status()[0].next_seq == 3)
        s = w.status()[0]
        assert s.malformed == 3 and s.incomplete_since == 1 and s.blocks == 1
        assert "seq 1" in s.last_error
    pub.close(linger=0)
    ctx.term()


def test_a_recording_reads_back_with_its_seqs_and_times(publisher):
    pub = publisher()
    batches = chain(1, 4) + [EventBatch(9.0, (BlockRemoved((2,), "GPU", 0),))]
    out = io.BytesIO()
    recorder = Recorder(out)
    with Watcher([_endpoint(pub)], replay_timeout=seconds(5), sink=recorder) as w:
        w.poll(0.05)
        for b in batches:
            pub.publish(b)
        wait_for(w, lambda: w.status()[0].next_seq == 5)
        live = dict(w.streams[0].cache.copies)
    records = read_recording(out.getvalue())
    assert [r.seq for r in records] == [0, 1, 2, 3, 4]
    assert all(r.received > 0 and r.source == _endpoint(pub).name for r in records)
    assert [r.batch.ts for r in records] == [b.ts for b in batches]
    (stream,) = replay_recording(records).values()
    assert stream.cache.copies == live and stream.incomplete_since is None
    gap = replay_recording([r for r in records if r.seq != 2])
    assert next(iter(gap.values())).incomplete_since == 2  # a gap in the file reads as lost
    trace = load_trace(out.getvalue())  # the Trace debugger opens the recording as it is
    assert trace.format == "kv_events" and [b.ts for b in trace.batches] == [b.ts for b in batches]


def test_vllm_and_sglang_payloads_both_apply():
    """vLLM 0.33's own bytes for a minimal BlockStored batch (its msgspec encoder: map16 header,
    lora_name nil, rank nil) and an SGLang-style one (a fixmap without medium or lora_name, a
    signed hash, attn_dp_rank 1) are both applied."""
    from radix.watch.stream import Stream
    from radix.watch.wire import Message
    vllm = bytes.fromhex(
        "93cb41d954fc4010000091de0008a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368"
        "657391cf0123456789abcdefb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f69647394"
        "01020304aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f"
        "6e616d65c0c0")
    import msgpack
    sglang = msgpack.packb([2.0, [{"type": "BlockStored", "block_hashes": [-5],
                                   "parent_block_hash": 0x0123456789ABCDEF,
                                   "token_ids": [5, 6, 7, 8], "block_size": 4,
                                   "lora_id": None}], 1])
    s = Stream("w")
    s.on_replay([Message(b"", 0, vllm), Message(b"", 1, sglang)], 0.0)
    assert s.status().malformed == 0 and s.cache.overlap([1, 2, 3, 4, 5, 6, 7, 8]) == 2
    assert sorted(s.cache.blocks) == [-5, 0x0123456789ABCDEF] and s.rank == 1


def test_radix_watch_command_prints_the_view_as_json(publisher, tmp_path):
    pub = publisher()
    for b in chain(1, 3):
        pub.publish(b)
    wait_sent(pub, 3)
    record = tmp_path / "watch.msgpack"
    spec = f"{pub.endpoint},{pub.replay_endpoint}"
    proc = subprocess.run(
        [sys.executable, "-m", "radix", "watch", spec, "--duration", "1.5", "--json",
         "--record", str(record)], cwd=ROOT, capture_output=True, text=True, timeout=seconds(60))
    assert proc.returncode == 0, proc.stderr
    (worker,) = json.loads(proc.stdout)["workers"]
    assert [b["hash"] for b in worker["blocks"]] == [1, 2, 3]
    assert worker["blocks"][1]["parent"] == 1 and worker["blocks"][1]["token_ids"] == [2, 2]
    plain = tmp_path / "plain.msgpack"
    again = subprocess.run([sys.executable, "-m", "radix", "watch", "--read", str(record),
                            "--json", "--plain", str(plain)], cwd=ROOT, capture_output=True,
                           text=True, timeout=seconds(60))
    assert json.loads(again.stdout)["workers"][0]["blocks"] == worker["blocks"]
    trace = load_kv_events(plain.read_bytes())  # the Trace debugger's loader reads the export
    assert len(trace.batches) == 3 and set(WorkerCache.of(trace.batches).blocks) == {1, 2, 3}
    bad = subprocess.run([sys.executable, "-m", "radix", "watch", "localhost:1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=seconds(60))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "tcp://" in bad.stderr


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_message(sub: zmq.Socket, pub: ZmqEventPublisher) -> list[bytes]:
    """Publishes empty batches until one reaches `sub` (ZMQ's slow joiner)."""
    deadline = time.monotonic() + seconds(20)
    while not sub.poll(100):
        assert time.monotonic() < deadline, "nothing arrived"
        pub.publish(EventBatch(0.0, ()))
    return sub.recv_multipart()


def test_bind_true_binds_a_concrete_host_and_vllms_rule_connects_to_it():
    """tcp://127.0.0.1:PORT: with bind=True (engine serve) the publisher listens there and a
    subscriber that connects receives; with vLLM's rule (bind=None) it connects out, so it is a
    subscriber that *binds* there that receives (a proxy's place)."""
    ctx = zmq.Context()
    port = _free_port()
    pub = ZmqEventPublisher(0, f"tcp://127.0.0.1:{port}", None, bind=True)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        assert pub.binds and pub.endpoint == f"tcp://127.0.0.1:{port}"
        sub.connect(pub.endpoint)
        assert len(_first_message(sub, pub)) == 3
    finally:
        pub.close()
        sub.close(linger=0)
    port = _free_port()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(f"tcp://127.0.0.1:{port}")
    pub = ZmqEventPublisher(0, f"tcp://127.0.0.1:{port}", None)
    try:
        assert not pub.binds
        assert len(_first_message(sub, pub)) == 3
    finally:
        pub.close()
        sub.close(linger=0)
        ctx.term()
