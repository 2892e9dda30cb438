"""Watch under a hostile or broken publisher (issue 40, item 5): a replay seq outside the request
is a malformed frame, `--duration` bounds every wait, a quiet replay socket is not waited on per
gap, frames past the size cap never arrive, `--read` stays within the loaders' byte cap.

Before: a replay answer with seq 2**63 wedged the view for good (every later batch, the
AllBlocksCleared too, dropped as a duplicate); `watch --duration 5` ran 100 s with skipping seqs
and a silent replay socket; the SUB socket took any frame (400 MB: 829 MB peak) and queued
without bound; `--read` read a 1 GB file whole. Sockets bind port 0 on 127.0.0.1; every wait is
bounded by the machine factor, and none decides a pass.
"""

from __future__ import annotations

import threading

import zmq
from machine import poll_until, seconds

from radix.blocks.kv_events import EventBatch, encode_batch
from radix.cli import main
from radix.events import AllBlocksCleared, BlockStored
from radix.watch.stream import Stream
from radix.watch.subscriber import Endpoint, Watcher
from radix.watch.wire import Message, seq_bytes


def _stored(h: int) -> bytes:
    return encode_batch(EventBatch(float(h), (BlockStored((h,), None, (h, h), 2, None, "GPU",
                                                          None),)))


def test_a_replay_seq_outside_the_request_is_malformed_not_a_wedge():
    """Live seq 5 arrives first: catch up from 0. The answer holds seqs 0, 1 and 2**63: the
    last is outside [0, 5 + MAX_REPLAY_SPAN] and counted malformed; 0 and 1 apply, 5 is held
    then applied (2..4 lost). Live 6 (AllBlocksCleared) applies and the view is exact again;
    before, next_seq became 2**63 + 1 and 6 was dropped as a duplicate forever."""
    s = Stream("w")
    assert s.on_live(Message(b"", 5, _stored(5)), 0.0) == 0
    answer = [Message(b"", 0, _stored(1)), Message(b"", 1, _stored(2)),
              Message(b"", 2**63, _stored(9))]
    assert s.on_replay(answer, 0.0) == 1  # 2..4 still missing: worth one more replay
    s.give_up(0.0)  # the subscriber's last round: what is held applies, 2..4 lost
    st = s.status()
    assert (st.malformed, st.next_seq, st.lost) == (1, 6, 3) and "2**63" not in st.last_error
    assert "outside the range asked for" in st.last_error
    s.on_live(Message(b"", 6, encode_batch(EventBatch(6.0, (AllBlocksCleared(),)))), 0.0)
    st = s.status()
    assert st.next_seq == 7 and st.exact and st.duplicates == 0 and st.blocks == 0


class _Publisher:
    """A raw PUB and a ROUTER that counts replay requests and never answers them."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.pub, self.router = self.ctx.socket(zmq.PUB), self.ctx.socket(zmq.ROUTER)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.LINGER, 0)
        pub = self.pub.bind_to_random_port("tcp://127.0.0.1")
        replay = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = Endpoint(f"tcp://127.0.0.1:{pub}", f"tcp://127.0.0.1:{replay}")
        self.requests = 0

    def count_requests(self) -> int:
        while self.router.poll(0):
            self.router.recv_multipart()
            self.requests += 1
        return self.requests

    def send(self, seq: int, payload: bytes) -> None:
        self.pub.send_multipart([b"", seq_bytes(seq), payload])

    def close(self) -> None:
        self.pub.close(linger=0)
        self.router.close(linger=0)
        self.ctx.term()


def test_duration_bounds_the_watch_even_while_a_replay_is_silent(capsys):
    """`watch --duration 0.3 --replay-timeout 600`: the catch-up asks a replay socket that
    never answers. The command ends at its duration (the replay's wait is cut there), not
    after 600 s; the thread is joined with a generous bound that only turns a hang into a
    failure."""
    fake = _Publisher()
    spec = f"{fake.endpoint.pub},{fake.endpoint.replay}"
    rc: list[int] = []
    thread = threading.Thread(target=lambda: rc.append(main(
        ["watch", spec, "--duration", "0.3", "--replay-timeout", "600"])), daemon=True)
    try:
        thread.start()
        thread.join(seconds(30))
        assert not thread.is_alive() and rc == [0], "watch ran past its --duration"
        assert fake.count_requests() == 1
        assert "UNKNOWN" in capsys.readouterr().out
    finally:
        fake.close()


def test_a_quiet_replay_socket_is_not_waited_on_for_every_gap():
    """Live seqs 1, 3, 5, 7, 9 (each a gap) with a replay socket that never answers: one
    replay is asked and waited for (0.3 s); the later gaps are lost at once while it is
    backed off (it was one 0.3 s wait per gap)."""
    fake = _Publisher()
    try:
        with Watcher([fake.endpoint], replay_timeout=0.3) as w:
            w.start()  # the first catch-up: asked, quiet
            poll_until(lambda: w.poll(0.01) >= 0 and w.streams[0].last_live is not None or
                       fake.send(1, _stored(1)), 30)
            for seq in (3, 5, 7, 9):
                fake.send(seq, _stored(seq))
            poll_until(lambda: w.poll(0.01) >= 0 and w.streams[0].last_live == 9, 30,
                       lambda: w.status())
            assert fake.count_requests() == 1
            st = w.status()[0]
            assert st.next_seq == 10 and st.incomplete_since is not None and st.gaps >= 4
    finally:
        fake.close()


def test_frames_past_the_size_cap_never_arrive():
    """Max frame 64 KiB: a 1 MiB frame is refused by ZMQ, which drops the connection for good
    (a protocol error); the watcher connects again and small batches after it arrive. Before,
    the big one was read whole (and counted malformed here: it is not a batch). The socket
    queues 10,000 messages at most."""
    fake = _Publisher()
    try:
        with Watcher([Endpoint(fake.endpoint.pub, None)], max_frame_bytes=64 * 1024) as w:
            assert w._subs[0].getsockopt(zmq.MAXMSGSIZE) == 64 * 1024
            assert w._subs[0].getsockopt(zmq.RCVHWM) == 10_000
            w.start()
            seq = [0]

            def sent(payload: bytes) -> bool:
                fake.send(seq[0], payload)
                seq[0] += 1
                w.poll(0.02)
                return w.streams[0].counts["applied"] > 0
            poll_until(lambda: sent(_stored(seq[0] + 1)), 30, lambda: w.status())  # connected
            sent(b"\x00" * 2**20)  # junk, past the cap: the connection is dropped for it
            applied = w.streams[0].counts["applied"]
            poll_until(lambda: sent(_stored(seq[0] + 1)) and
                       w.streams[0].counts["applied"] > applied, 30, lambda: w.status())
            assert w.status()[0].malformed == 0 and w.reconnects == [1]
    finally:
        fake.close()


def test_read_stays_within_the_loaders_byte_cap(tmp_path, capsys):
    """`watch --read` reads at most max_bytes + 1 bytes, as every trace loader does, and says
    which cap (raise it with --limit max_bytes=N)."""
    path = tmp_path / "big.msgpack"
    path.write_bytes(b"\x90" * 2_000)
    assert main(["watch", "--read", str(path), "--limit", "max_bytes=1000"]) == 2
    assert "larger than the 1,000-byte cap (max_bytes)" in capsys.readouterr().err


def test_a_watcher_closed_twice_says_nothing_the_second_time():
    """The Watch page's session registry sweeps sessions whose browser went away, and may close
    a watcher its page already closed: the second close is a no-op, not a ZMQError (it was the
    Watch page's "Socket operation on non-socket")."""
    w = Watcher([Endpoint("tcp://127.0.0.1:1", None)])
    w.close()
    w.close()
