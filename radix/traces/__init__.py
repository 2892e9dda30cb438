"""Trace files: one loader per format, and the `Trace` they all return.

`load_trace(path_or_bytes)` (base.py) detects the format and loads it. base.py holds the shared
types, field checks, what a trace may expand to (`TraceLimits`, counted by its `Tally`), a trace
request's `Req`, and reads and writes the request format; mooncake.py, kv_events.py and ops.py
are the three other formats, put into base.py's `LOADERS` below (they import base.py, so it
cannot import them).
"""

from radix.traces.base import (
    LOADERS,
    Trace,
    TraceError,
    TraceLimits,
    TraceRequest,
    detect_format,
    load_trace,
    to_req,
)
from radix.traces.kv_events import read_kv_events
from radix.traces.mooncake import read_mooncake
from radix.traces.ops import read_ops

LOADERS.update(mooncake=read_mooncake, kv_events=read_kv_events, ops=read_ops)

__all__ = ["Trace", "TraceError", "TraceLimits", "TraceRequest", "detect_format", "load_trace",
           "to_req"]
