"""One publisher's stream of batches, put in order: gaps, replays, restarts, malformed payloads.

No sockets here (subscriber.py has them), so every rule is testable. A batch is applied only in
sequence order. A live batch past the next expected seq, or the first one seen, is held while a
replay fetches what is missing; a replay answer that starts later than asked, or a gap no replay
fills, is *lost*: the view says it is incomplete and since which seq, until an AllBlocksCleared
makes it exact again. A view is *exact* only once a batch has been applied since the start (or
the last restart): before that, what the publisher holds is unknown (a replay that never
answered, a PUB socket that sends nothing), and the status says so rather than "exact". Live
seqs from one publisher only grow, so a live seq that goes back is a restart (a new process with
an empty cache): the view empties and catches up from seq 0. A gap is checked first by asking
one batch back and comparing it with the last one applied: a different payload means the
publisher restarted and ran past our seq before we saw it. A replay answer's seqs must lie in
what was asked (from the start seq, at most MAX_REPLAY_SPAN past the start or the last live
seq) and count up one by one, as a replay buffer holds them: any other is a malformed frame,
dropped, so one bad seq (2**63) cannot make every later batch look like a duplicate.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from radix.blocks.kv_events import decode_batch
from radix.watch.view import WorkerCache
from radix.watch.wire import Message

Sink = Callable[[str, Message, float], None]  # (stream name, message, received at): a recorder
MAX_REPLAY_SPAN = 1_000_000  # seqs one replay answer may cover (vLLM's buffer holds 10,000)


class Status(NamedTuple):
    name: str
    rank: int | None  # data_parallel_rank of the last batch
    blocks: int  # hashes cached now
    applied: int  # batches applied
    next_seq: int | None  # the next seq expected (None: nothing applied since the last start)
    incomplete_since: int | None  # first lost seq since the view was last exact; None: exact
    lost: int  # seqs lost for good (every range, since the start)
    gaps: int  # gaps seen in the live stream
    replayed: int  # batches applied from the replay socket
    duplicates: int  # batches dropped as already applied
    restarts: int  # publisher restarts seen
    malformed: int  # frames or payloads that could not be read
    last_error: str  # the latest malformed one, in words
    caught_up: bool = False  # a batch applied since the start or last restart (every seq before
    #                          it applied or counted lost); False: what the publisher holds is
    #                          unknown, whatever `blocks` says
    unknown_why: str = ""  # while not caught up: why (the last catch-up that failed)

    @property
    def exact(self) -> bool:
        """Caught up, and nothing lost since the view was last exact."""
        return self.caught_up and self.incomplete_since is None

    def view_state(self) -> str:
        """The view in words, for the CLI line and the Watch page.

        >>> Status("w", None, 0, 0, None, None, 0, 0, 0, 0, 0, 0, "").view_state()
        'UNKNOWN: nothing received yet'
        >>> Status("w", 0, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0, "", True).view_state()
        'INCOMPLETE since seq 1'
        """
        if self.incomplete_since is not None:
            return f"INCOMPLETE since seq {self.incomplete_since}"
        if not self.caught_up:
            return "UNKNOWN: nothing received yet" + (f" ({self.unknown_why})"
                                                      if self.unknown_why else "")
        return "exact"


def digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()


class Stream:
    """The batches of one publisher into one `WorkerCache`.

    >>> from radix.blocks.kv_events import EventBatch, encode_batch
    >>> s, b = Stream("w0"), encode_batch(EventBatch(1.0, (), 0))
    >>> s.on_live(Message(b"", 0, b), 0.0)  # the first batch: catch up from seq 0 first
    0
    >>> s.on_replay([Message(b"", 0, b)], 0.0), s.status().next_seq
    (None, 1)
    """

    def __init__(self, name: str, medium: str | None = None, sink: Sink | None = None,
                 rate_window: int = 100_000) -> None:
        self.name, self.sink = name, sink
        self.cache = WorkerCache(medium)
        self.expected: int | None = None
        self.last_live: int | None = None
        self.buffer: list[tuple[Message, float]] = []  # live batches held during a catch-up
        self.catching_up = False
        self.lost: list[tuple[int, int]] = []  # inclusive seq ranges, in order
        self.incomplete_since: int | None = None
        self.rank: int | None = None
        self.counts = dict.fromkeys(("applied", "gaps", "replayed", "duplicates", "restarts",
                                     "malformed"), 0)
        self.last_error = ""
        self.history: deque[tuple[float, int, int]] = deque(maxlen=rate_window)
        self._digest: bytes | None = None
        self._verify = False  # the next replay starts one batch back, to be compared
        self.asked: int | None = None  # the start seq of the replay asked for last
        self.caught_up = False  # see Status.caught_up
        self.unknown_why = ""

    # --- the subscriber's calls -----------------------------------------------------------
    def start(self) -> int:
        """A catch-up from seq 0 (a new subscriber): returns the replay's start seq."""
        self.catching_up = True
        return self._replay_start()

    def on_live(self, msg: Message, at: float) -> int | None:
        """A PUB message; returns a seq to replay from when one is needed, else None."""
        if self.last_live is not None and msg.seq <= self.last_live:
            self._restart()
        self.last_live = msg.seq
        if self.catching_up:
            self.buffer.append((msg, at))
            return None
        if self.expected is not None and msg.seq < self.expected:
            self.counts["duplicates"] += 1
            return None
        if self.expected is None or msg.seq > self.expected:
            self.counts["gaps"] += self.expected is not None
            self.buffer.append((msg, at))
            self.catching_up = True
            return self._replay_start()
        self._apply(msg, at)
        return None

    def on_replay(self, items: list[Message] | None, at: float, why: str = "") -> int | None:
        """A replay's answer (None: no replay socket, or it timed out, `why` says which: then
        it gives up). Applies what it can; returns the seq of another replay worth asking, or
        None when caught up. A caller that stops asking calls `give_up`."""
        if items is None:
            self.give_up(at, why)
            return None
        verify, self._verify = self._verify, False
        for msg in self._in_range(items):
            if verify:
                verify = False
                if self.expected is not None and msg.seq == self.expected - 1:
                    if digest(msg.payload) != self._digest:  # not the batch we applied
                        self._restart(keep_buffer=True)
                        return self._replay_start()
                    continue
            self._take(msg, at, replayed=True)
        while self.buffer and self.buffer[0][0].seq <= (self.expected or 0):
            msg, t = self.buffer.pop(0)
            self._take(msg, t)
        if self.buffer:
            return self._replay_start()
        self.catching_up = False
        if not self.caught_up:  # a whole answer, but empty: the publisher has sent nothing yet
            self.unknown_why = "the replay buffer was empty"
        return None

    def give_up(self, at: float, why: str = "") -> None:
        """No replay can fill the gaps: apply what is held, marking the seqs between as lost.
        Nothing held and never caught up: the view stays unknown, `why` says why."""
        if not self.caught_up and why:
            self.unknown_why = why
        for msg, t in self.buffer:
            self._take(msg, t)
        self.buffer.clear()
        self.catching_up = False
        self._verify = False

    def malformed(self, why: str) -> None:
        self.counts["malformed"] += 1
        self.last_error = why

    def status(self) -> Status:
        c = self.counts
        return Status(self.name, self.rank, len(self.cache.blocks), c["applied"], self.expected,
                      self.incomplete_since, sum(b - a + 1 for a, b in self.lost), c["gaps"],
                      c["replayed"], c["duplicates"], c["restarts"], c["malformed"],
                      self.last_error, self.caught_up, "" if self.caught_up else self.unknown_why)

    # --- inside ---------------------------------------------------------------------------
    def _replay_start(self) -> int:
        self._verify = self.expected is not None and self.expected > 0
        self.asked = 0 if self.expected is None else max(self.expected - 1, 0)
        return self.asked

    def _in_range(self, items: list[Message]) -> list[Message]:
        """The replay answer's messages whose seqs a replay buffer could hold for the request:
        from the start asked for, one by one, at most MAX_REPLAY_SPAN on; the rest malformed.

        >>> s = Stream("w"); s.asked, s.last_live = 0, 3
        >>> [m.seq for m in s._in_range([Message(b"", q, b"") for q in (0, 1, 2**63, 2, 9)])]
        [0, 1, 2]
        >>> s.status().malformed, s.status().last_error
        (2, 'replay frame: seq 9 does not follow seq 2 (a replay counts up one by one)')
        """
        low = self.asked or 0
        high = max(low, self.last_live or 0) + MAX_REPLAY_SPAN
        kept: list[Message] = []
        for msg in items:
            if not low <= msg.seq <= high:
                self.malformed(f"replay frame: seq {msg.seq} outside the range asked for "
                               f"[{low:,}, {high:,}]")
            elif kept and msg.seq != kept[-1].seq + 1:
                self.malformed(f"replay frame: seq {msg.seq} does not follow seq "
                               f"{kept[-1].seq} (a replay counts up one by one)")
            else:
                kept.append(msg)
        return kept

    def _take(self, msg: Message, at: float, replayed: bool = False) -> None:
        """Applies `msg` in order: a seq already applied is a duplicate; seqs skipped are lost."""
        if self.expected is not None and msg.seq < self.expected:
            self.counts["duplicates"] += 1
            return
        first = 0 if self.expected is None else self.expected
        if msg.seq > first:
            self._lose(first, msg.seq - 1)
        self.counts["replayed"] += replayed
        self._apply(msg, at)

    def _apply(self, msg: Message, at: float) -> None:
        self.expected = msg.seq + 1
        self.caught_up = True  # every seq before this one is applied or counted lost
        self._digest = digest(msg.payload)
        try:
            batch = decode_batch(msg.payload)
        except Exception as exc:  # noqa: BLE001 - counted and shown, never fatal
            self.malformed(f"seq {msg.seq}: {type(exc).__name__}: {exc}"[:300])
            self._lose(msg.seq, msg.seq)
            return
        applied = self.cache.apply(batch, msg.seq, at)
        if applied.cleared:
            self.incomplete_since = None  # everything before the clear no longer matters
        self.rank = batch.data_parallel_rank
        self.counts["applied"] += 1
        self.history.append((at, applied.stored, applied.removed))
        if self.sink is not None:
            self.sink(self.name, msg, at)

    def _lose(self, first: int, last: int) -> None:
        self.lost.append((first, last))
        if self.incomplete_since is None:
            self.incomplete_since = first

    def _restart(self, keep_buffer: bool = False) -> None:
        """A new publisher (a new engine process, its cache empty): start over. The held live
        batches are the old publisher's, unless the restart showed in a replay (then they are
        the new one's)."""
        self.counts["restarts"] += 1
        self.cache.clear()
        self.expected = self._digest = None
        if keep_buffer:
            self.last_live = self.buffer[-1][0].seq if self.buffer else None
        else:
            self.buffer.clear()
            self.last_live = None
        self.incomplete_since = None
        self._verify = False
        self.caught_up, self.unknown_why = False, ""
