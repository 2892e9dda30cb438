"""The subscriber's ordering rules without sockets: a simulated publisher with a bounded replay
buffer, a subscriber that joins late and loses live batches, and the oracle: the block view of
the true batches applied in order (WorkerCache.of). Whenever the view differs from the truth,
it must say it is incomplete; with a buffer that holds everything it never is.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.kv_events import EventBatch, encode_batch
from radix.events import AllBlocksCleared, BlockRemoved, BlockStored
from radix.watch.stream import Stream
from radix.watch.view import WorkerCache
from radix.watch.wire import Message

BS = 2  # block size of the synthetic events


def synthetic_batches(seed: int, n: int, clears: bool = True) -> list[EventBatch]:
    """n batches a plausible cache could publish: chains stored on existing blocks or from the
    start, removals of cached hashes, an AllBlocksCleared now and then (if `clears`)."""
    rng, cached, next_hash, out = random.Random(seed), [], 1, []
    for _ in range(n):
        events = []
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.05 and clears:
                events.append(AllBlocksCleared())
                cached.clear()
            elif roll < 0.35 and cached:
                h = cached.pop(rng.randrange(len(cached)))
                events.append(BlockRemoved((h,), "GPU", 0))
            else:
                parent = rng.choice(cached) if cached and rng.random() < 0.6 else None
                k = rng.randint(1, 3)
                hashes = tuple(range(next_hash, next_hash + k))
                next_hash += k
                tokens = tuple(rng.randrange(50) for _ in range(k * BS))
                events.append(BlockStored(hashes, parent, tokens, BS, None, "GPU", None))
                cached.extend(hashes)
        out.append(EventBatch(float(len(out)), tuple(events), 0))
    return out


def _blocks(view) -> dict:
    return {h: (b.parent_block_hash, tuple(b.token_ids)) for h, b in view.blocks.items()}


def run_subscriber(payloads: list[bytes], join: int, buffer: int, dropped: set[int]) -> Stream:
    """The publisher has sent payloads[:join] when the subscriber starts; each later batch
    reaches it live unless dropped; a replay at time t answers from the last `buffer` sent."""
    stream = Stream("w0")

    def replay(start: int, sent: int) -> list[Message]:
        return [Message(b"", s, payloads[s]) for s in range(max(0, sent - buffer), sent)
                if s >= start]

    def repair(start: int | None, sent: int) -> None:
        for _ in range(4):
            if start is None:
                return
            start = stream.on_replay(replay(start, sent), 0.0)
        stream.give_up(0.0)

    repair(stream.start(), join)
    for seq in range(join, len(payloads)):
        if seq not in dropped:
            repair(stream.on_live(Message(b"", seq, payloads[seq]), 0.0), seq + 1)
    return stream


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), join=st.integers(0, 40),
       buffer=st.integers(1, 50), drops=st.sets(st.integers(0, 39), max_size=8))
def test_the_view_is_exact_or_says_it_is_incomplete(seed, n, join, buffer, drops):
    batches = synthetic_batches(seed, n)
    join = min(join, n)
    stream = run_subscriber([encode_batch(b) for b in batches], join, buffer, drops)
    applied = stream.expected or 0
    truth = WorkerCache.of(batches[:applied])
    assert applied >= max((s for s in range(join, n) if s not in drops), default=-1) + 1
    if stream.incomplete_since is None:
        assert _blocks(stream.cache) == _blocks(truth)
        assert stream.cache.copies == truth.copies
    if buffer >= n:  # every batch can be replayed: nothing is ever lost
        assert stream.incomplete_since is None and not stream.lost


def test_a_late_subscriber_catches_up_by_replay():
    """10 batches sent before it joins, buffer 10: all 10 replayed, nothing lost."""
    payloads = [encode_batch(b) for b in synthetic_batches(1, 14)]
    s = run_subscriber(payloads, join=10, buffer=10, dropped=set())
    assert s.status()[3:7] == (14, 14, None, 0)  # applied, next_seq, incomplete_since, lost
    assert s.counts["replayed"] == 10


def test_a_dropped_batch_is_repaired_from_the_buffer_or_marked_lost():
    """Batch 5 of 12 never arrives live. Buffer 4: when batch 6 shows the gap, the replay
    (asked from seq 4, one back, to check it is the same stream) still holds 5: repaired.
    Buffer 1: the replay holds only 6, so seq 5 is lost and the view is incomplete since 5."""
    payloads = [encode_batch(b) for b in synthetic_batches(2, 12, clears=False)]
    ok = run_subscriber(payloads, 0, buffer=4, dropped={5})
    assert ok.incomplete_since is None and ok.counts["gaps"] == 1 and ok.expected == 12
    bad = run_subscriber(payloads, 0, buffer=1, dropped={5})
    assert bad.incomplete_since == 5 and bad.lost == [(5, 5)] and bad.expected == 12


def test_a_restarted_publisher_empties_the_view_and_starts_over():
    """Old publisher: seqs 0..5; new one (empty cache) sends seq 0.. again: going back is a
    restart; the view then holds only the new publisher's blocks."""
    old = [encode_batch(b) for b in synthetic_batches(4, 6)]
    new_batches = synthetic_batches(5, 3)
    new = [encode_batch(b) for b in new_batches]
    s = Stream("w0")
    assert s.on_replay([], 0.0) is None
    for seq, p in enumerate(old):
        assert s.on_live(Message(b"", seq, p), 0.0) in (None, 0)
        s.on_replay([Message(b"", seq, p)] if seq == 0 else [], 0.0)
    assert s.expected == 6
    start = s.on_live(Message(b"", 0, new[0]), 0.0)
    assert s.counts["restarts"] == 1 and start == 0
    s.on_replay([Message(b"", i, p) for i, p in enumerate(new)], 0.0)
    assert _blocks(s.cache) == _blocks(WorkerCache.of(new_batches))
    assert s.incomplete_since is None


def test_a_restart_that_ran_past_our_seq_is_caught_by_the_one_back_check():
    """We applied 0..2 of the old stream; the new publisher is at seq 4 when we next hear it.
    It looks like a gap, but the replay of seq 2 (one back) differs from the batch we applied:
    a restart, so the view starts over from the new stream's seq 0."""
    old = [encode_batch(b) for b in synthetic_batches(6, 3)]
    new_batches = synthetic_batches(7, 5)
    new = [encode_batch(b) for b in new_batches]
    s = Stream("w0")
    s.on_replay([Message(b"", i, p) for i, p in enumerate(old)], 0.0)
    assert s.expected == 3
    start = s.on_live(Message(b"", 4, new[4]), 0.0)
    assert start == 2
    start = s.on_replay([Message(b"", i, new[i]) for i in range(2, 5)], 0.0)
    assert s.counts["restarts"] == 1 and start == 0
    assert s.on_replay([Message(b"", i, p) for i, p in enumerate(new)], 0.0) is None
    assert _blocks(s.cache) == _blocks(WorkerCache.of(new_batches)) and s.expected == 5


def test_a_malformed_payload_is_counted_and_marks_its_seq_lost():
    payloads = [encode_batch(b) for b in synthetic_batches(8, 3, clears=False)]
    payloads[1] = b"\xc1 not msgpack"
    s = run_subscriber(payloads, 0, buffer=10, dropped=set())
    assert s.counts["malformed"] == 1 and "seq 1" in s.last_error
    assert s.incomplete_since == 1 and s.expected == 3


def test_all_blocks_cleared_makes_an_incomplete_view_exact_again():
    """Lost seq 1, then seq 3 clears everything: from there the view is exact again."""
    stored = BlockStored((1,), None, (1, 2), BS, None, "GPU", None)
    batches = [EventBatch(0.0, (stored,), 0), EventBatch(1.0, (stored,), 0),
               EventBatch(2.0, (BlockRemoved((1,), "GPU", 0),), 0),
               EventBatch(3.0, (AllBlocksCleared(), stored), 0)]
    payloads = [encode_batch(b) for b in batches]
    s = run_subscriber(payloads, 0, buffer=1, dropped={1})
    assert s.lost == [(1, 1)] and s.incomplete_since is None
    assert _blocks(s.cache) == _blocks(WorkerCache.of(batches))


def test_runs_merge_single_child_chains_and_split_at_branches():
    """Chain 1-2-3 from the start, then 4 under 1: runs are [1] (root), [2, 3] and [4] under 1;
    a block whose parent is gone hangs under the root as an orphan run."""
    c = WorkerCache()
    c.apply(EventBatch(0.0, (BlockStored((1, 2, 3), None, tuple(range(6)), BS, None, "GPU",
                                         None),)))
    assert [(r.id, r.block_hashes) for r in c.runs()] == [(1, (1, 2, 3))]
    c.apply(EventBatch(1.0, (BlockStored((4,), 1, (7, 7), BS, None, "GPU", None),)))
    assert [(r.id, r.parent, r.block_hashes) for r in c.runs()] == [
        (1, None, (1,)), (2, 1, (2, 3)), (4, 1, (4,))]
    c.apply(EventBatch(2.0, (BlockRemoved((1,), "GPU", 0),)))
    assert sorted((r.id, r.orphan) for r in c.runs()) == [(2, True), (4, True)]
    assert c.overlap([0, 1, 2, 3]) == 0  # block 1 is gone: nothing is reachable


def test_a_view_is_unknown_until_a_batch_arrives_never_exact_with_nothing():
    """A new stream, an empty replay answer, a failed catch-up: each says UNKNOWN (0 blocks is
    not known to be the publisher's pool); the first batch applied (seq 0 here) makes it exact,
    and a restart makes it unknown again until the new publisher's first batch."""
    p = encode_batch(synthetic_batches(9, 1, clears=False)[0])
    s = Stream("w0")
    assert not s.status().exact and s.status().view_state() == "UNKNOWN: nothing received yet"
    s.start()
    assert s.on_replay([], 0.0) is None  # a whole answer, empty
    assert s.status().view_state() == ("UNKNOWN: nothing received yet (the replay buffer was "
                                       "empty)")
    s.give_up(0.0, "no replay endpoint to catch up from")
    assert "no replay endpoint" in s.status().view_state() and not s.status().exact
    assert s.on_live(Message(b"", 0, p), 0.0) == 0  # held while a replay is asked
    s.on_replay(None, 0.0, "timed out")  # none came: the live seq 0 is applied, nothing lost
    assert s.status().exact and s.status().view_state() == "exact"
    s.on_live(Message(b"", 0, p), 0.0)  # seq 0 again: a restart
    assert s.counts["restarts"] == 1 and not s.status().caught_up
    s.give_up(0.0, "timed out")
    assert s.status().exact  # the held seq 0 of the new publisher was applied


def test_a_late_join_without_replay_is_incomplete_not_exact():
    """No replay socket, first live batch seq 4: seqs 0..3 are lost, and the view says so."""
    p = encode_batch(synthetic_batches(10, 1, clears=False)[0])
    s = Stream("w0")
    s.start()
    s.give_up(0.0, "no replay endpoint to catch up from")
    assert s.on_live(Message(b"", 4, p), 0.0) == 0
    s.on_replay(None, 0.0, "no replay endpoint to catch up from")
    st_ = s.status()
    assert (st_.caught_up, st_.exact, st_.lost, st_.view_state()) == (
        True, False, 4, "INCOMPLETE since seq 0")
