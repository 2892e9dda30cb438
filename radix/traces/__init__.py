"""Trace files: one loader per format, and the `Trace` they all return.

`load_trace(path_or_bytes)` detects the format and loads it (load.py, which also reads and
writes the request format); base.py holds the shared types, field checks, what a trace may
expand to (`TraceLimits`, counted by its `Tally`) and a trace request's `Req`; mooncake.py,
kv_events.py and ops.py are the three other formats.
"""

from radix.traces.base import Trace, TraceError, TraceLimits, TraceRequest, to_req
from radix.traces.load import detect_format, load_trace

__all__ = ["Trace", "TraceError", "TraceLimits", "TraceRequest", "detect_format", "load_trace",
           "to_req"]
