"""Trace files: one loader per format, and the `Trace` they all return.

`load_trace(path_or_bytes)` detects the format and loads it (load.py); base.py holds the shared
types, field checks and what a trace may expand to (`TraceLimits`, counted by its `Tally`);
requests.py, mooncake.py, kv_events.py and ops.py are the four formats.
"""

from radix.traces.base import Trace, TraceError, TraceLimits, TraceRequest, to_req
from radix.traces.load import detect_format, load_trace

__all__ = ["Trace", "TraceError", "TraceLimits", "TraceRequest", "detect_format", "load_trace",
           "to_req"]
