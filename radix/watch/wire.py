"""The ZMQ framing of KV-event streams, as vLLM 0.33's ZmqEventPublisher (and SGLang's) use it.

PUB: three frames `(topic, seq as 8 bytes big-endian, msgpack EventBatch)`, seq counting from 0
per publisher. Replay: a DEALER sends `(b"", start seq as 8 bytes)` to the ROUTER; the answer is
one `(b"", topic, seq, payload)` per buffered batch with seq >= start, then the end marker
`(b"", b"", END_SEQ, b"")`, END_SEQ being -1 as 8 signed bytes. Endpoints of data-parallel rank r
add r to the port (vLLM's offset_endpoint_port). Pure functions: the sockets are elsewhere.
"""

from __future__ import annotations

from typing import NamedTuple

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class FrameError(ValueError):
    """A frame set that is not a KV-event message; the text says what is wrong."""


class Message(NamedTuple):
    topic: bytes
    seq: int
    payload: bytes


def seq_bytes(seq: int) -> bytes:
    """The 8-byte big-endian sequence number.

    >>> seq_bytes(258).hex()
    '0000000000000102'
    """
    return seq.to_bytes(8, "big")


def parse_pub(frames: list[bytes]) -> Message:
    """A PUB message's three frames, checked.

    >>> parse_pub([b"", seq_bytes(7), b"\\x90"]).seq
    7
    >>> parse_pub([b"x", b"\\x01"])
    Traceback (most recent call last):
    ...
    radix.watch.wire.FrameError: expected 3 frames (topic, seq, payload), got 2
    """
    if len(frames) != 3:
        raise FrameError(f"expected 3 frames (topic, seq, payload), got {len(frames)}")
    topic, seq, payload = frames
    if len(seq) != 8:
        raise FrameError(f"the sequence frame holds {len(seq)} bytes, not 8")
    if seq == END_SEQ:
        raise FrameError("the end-of-replay marker arrived on the PUB socket")
    return Message(bytes(topic), int.from_bytes(seq, "big"), bytes(payload))


def replay_request(start_seq: int) -> list[bytes]:
    """What a DEALER sends to ask for every buffered batch from `start_seq` on.

    >>> [f.hex() for f in replay_request(5)]
    ['', '0000000000000005']
    """
    return [b"", seq_bytes(start_seq)]


def parse_replay(frames: list[bytes]) -> Message | None:
    """One replay answer as a DEALER receives it: a message, or None for the end marker.

    >>> parse_replay([b"", b"", END_SEQ, b""]) is None
    True
    >>> parse_replay([b"", b"t", seq_bytes(3), b"\\x90"]).seq
    3
    """
    if len(frames) != 4 or frames[0] != b"":
        raise FrameError(f"expected 4 replay frames (b'', topic, seq, payload), got "
                         f"{len(frames)}")
    if frames[2] == END_SEQ:
        return None
    return parse_pub(frames[1:])


def offset_endpoint_port(endpoint: str | None, rank: int) -> str | None:
    """The endpoint of data-parallel rank `rank`: tcp port + rank (port 0 stays 0), inproc gets
    `_dp<rank>`; rank 0 and None are unchanged (vLLM's rule).

    >>> offset_endpoint_port("tcp://*:5557", 2), offset_endpoint_port("inproc://kv", 1)
    ('tcp://*:5559', 'inproc://kv_dp1')
    """
    if not endpoint or rank == 0:
        return endpoint
    if "inproc" in endpoint:
        return f"{endpoint}_dp{rank}"
    if "tcp" in endpoint:
        base, _, port = endpoint.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"endpoint {endpoint!r}: no port to offset")
        return endpoint if int(port) == 0 else f"{base}:{int(port) + rank}"
    raise ValueError(f"endpoint {endpoint!r}: must be tcp:// or inproc://")


def connectable(endpoint: str) -> str:
    """A bound wildcard endpoint as a client on this machine reaches it.

    >>> connectable("tcp://*:5557"), connectable("tcp://0.0.0.0:9")
    ('tcp://127.0.0.1:5557', 'tcp://127.0.0.1:9')
    """
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
        if endpoint.startswith(wildcard):
            return "tcp://127.0.0.1:" + endpoint[len(wildcard):]
    return endpoint
