"""Watching a serving cluster: KV-event streams from vLLM, SGLang or `engine serve`, over ZMQ.

`wire.py` (framing, replay protocol, port offsets), `view.py` (one worker's block cache rebuilt
from its events, its prefix tree, the router's overlap score), `stream.py` (one publisher's
batches in order: gaps, replays, restarts, malformed payloads), `subscriber.py` (the sockets),
`recording.py` (the stream saved with seq numbers and receive times), `rates.py`. Pure Python
and pyzmq: no torch, no numpy.
"""

from __future__ import annotations

from radix.watch.recording import Recorder, read_recording, replay_recording
from radix.watch.stream import Status, Stream
from radix.watch.subscriber import Endpoint, Watcher, expand_dp, parse_endpoint
from radix.watch.view import WorkerCache

__all__ = ["Endpoint", "Recorder", "Status", "Stream", "Watcher", "WorkerCache", "expand_dp",
           "parse_endpoint", "read_recording", "replay_recording"]
