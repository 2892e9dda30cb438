"""Catching up: `--replay-timeout` is an idle timeout, and a view is never "exact" before a batch.

A fake publisher (a raw ROUTER in a thread, vLLM's replay protocol: radix/watch/wire.py) answers
the first replay slowly but steadily (read to its end, though the whole answer takes longer than
the timeout), or stalls mid-answer (the view stays UNKNOWN, and the CLI line and the Watch
page's row say so, with 0 blocks, instead of "exact"). A late join on engine/kv_publisher.py
holding 2,000 batches catches up exactly. Sockets bind port 0 on 127.0.0.1; waits are bounded.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import zmq
from machine import seconds

from engine.kv_publisher import ZmqEventPublisher
from radix.blocks.kv_events import EventBatch, encode_batch
from radix.cli.watch import status_line
from radix.events import BlockStored
from radix.watch.subscriber import Endpoint, Watcher, parse_endpoint
from radix.watch.wire import END_SEQ, seq_bytes
from viz.cluster import grid_caption, status_rows


def _batch(h: int) -> bytes:
    parent = h - 1 if h > 1 else None
    return encode_batch(EventBatch(float(h), (BlockStored((h,), parent, (h, h), 2, None, "GPU",
                                                          None),)))


class SlowReplayer:
    """A ROUTER that answers each replay request with batches 1..n (seqs 0..n-1), `gap` s apart,
    then the end marker; with `stall_after`, it sends that many and then nothing until closed.
    A PUB socket beside it stays silent (nothing live)."""

    def __init__(self, n: int, gap: float, stall_after: int | None = None) -> None:
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.router = self.ctx.socket(zmq.ROUTER)
        pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = Endpoint(f"tcp://127.0.0.1:{pub_port}", f"tcp://127.0.0.1:{replay_port}")
        self.n, self.gap, self.stall_after = n, gap, stall_after
        self.stop = threading.Event()
        self.requests = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            client, _, start = self.router.recv_multipart()
            self.requests += 1
            for seq in range(int.from_bytes(start, "big"), self.n):
                if self.stall_after is not None and seq >= self.stall_after:
                    self.stop.wait()  # stalls: never answers the rest
                    return
                if self.stop.wait(self.gap):
                    return
                self.router.send_multipart([client, b"", b"", seq_bytes(seq), _batch(seq + 1)])
            self.router.send_multipart([client, b"", b"", END_SEQ, b""])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.pub.close(linger=0)
        self.router.close(linger=0)
        self.ctx.term()


def test_a_slow_but_steady_replay_is_read_to_its_end():
    """10 batches 0.1 s apart: the answer takes ~1 s, twice the 0.5 s timeout, but no wait
    between two messages reaches it; the view holds the 10-block chain, exact."""
    fake = SlowReplayer(10, 0.1)
    try:
        with Watcher([fake.endpoint], replay_timeout=0.5) as w:
            start = time.monotonic()
            w.start()
            took = time.monotonic() - start
            s = w.status()[0]
            assert (s.blocks, s.replayed, s.next_seq, s.lost) == (10, 10, 10, 0)
            assert s.exact and s.view_state() == "exact" and took > 0.5
            assert sorted(w.streams[0].cache.blocks) == list(range(1, 11))
    finally:
        fake.close()


def test_a_replay_that_stalls_leaves_the_view_unknown_not_exact():
    """3 batches, then silence: after 0.3 s idle the answer is dropped (not applied in part);
    no live batch follows, so nothing is known: 0 blocks, UNKNOWN with the reason, in the
    status, the CLI line and the Watch page's row and caption. A later catch-up that
    completes makes it exact."""
    fake = SlowReplayer(10, 0.01, stall_after=3)
    try:
        with Watcher([fake.endpoint], replay_timeout=0.3) as w:
            w.start()
            s = w.status()[0]
            assert (s.blocks, s.caught_up, s.exact, s.incomplete_since) == (0, False, False, None)
            assert s.view_state().startswith("UNKNOWN: nothing received yet (the replay went "
                                             "quiet for 0.3 s after 3 batches")
            line = status_line(w.streams[0], time.time())
            assert "UNKNOWN" in line and "exact" not in line
            view = SimpleNamespace(name=s.name, status=s, blocks=(), unreachable=frozenset(),
                                   block_size=None, rates=())
            (row,) = status_rows([view])
            assert row["view"].startswith("UNKNOWN") and "exact" not in grid_caption(view)
            fake.stall_after = None  # the publisher recovers: the next catch-up completes
            fake.stop.set()
            fake.thread.join(5)
            fake.stop.clear()
            fake.thread = threading.Thread(target=fake._serve, daemon=True)
            fake.thread.start()
            w.start()
            assert w.status()[0].exact and w.status()[0].blocks == 10
    finally:
        fake.close()


def test_a_late_join_on_a_publisher_holding_many_batches_is_exact():
    """2,000 one-block batches published before the watcher subscribes (engine/kv_publisher.py
    keeps them all: buffer_steps 10,000): the catch-up replays every one, exact."""
    pub = ZmqEventPublisher(0, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", bind=True)
    try:
        n = 2_000
        for h in range(1, n + 1):
            pub.publish(EventBatch(float(h), (BlockStored(
                (h,), h - 1 if h > 1 else None, (h, h), 2, None, "GPU", None),)))
        deadline = time.monotonic() + seconds(30)
        while pub.num_published < n:
            assert time.monotonic() < deadline, "the publisher did not send"
            time.sleep(0.01)
        spec = parse_endpoint(f"{pub.endpoint},{pub.replay_endpoint}")
        with Watcher([spec], replay_timeout=2.0) as w:
            w.start()
            s = w.status()[0]
            assert (s.blocks, s.replayed, s.next_seq, s.lost, s.exact) == (n, n, n, 0, True)
    finally:
        pub.close()


def test_an_answer_that_never_ends_is_capped_by_count(monkeypatch):
    """With the cap at 5 messages, an answer of 10 without pause is dropped (a flood cannot
    hold the watcher forever though no wait reaches the idle timeout): UNKNOWN, saying why."""
    import radix.watch.subscriber as subscriber
    monkeypatch.setattr(subscriber, "MAX_REPLAY_MESSAGES", 5)
    fake = SlowReplayer(10, 0.0)
    try:
        with Watcher([fake.endpoint], replay_timeout=2.0) as w:
            w.start()
            s = w.status()[0]
            assert s.blocks == 0 and "over 5 messages without its end" in s.view_state()
    finally:
        fake.close()
