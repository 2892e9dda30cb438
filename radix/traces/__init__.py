"""Trace files: one loader per format, and the `Trace` they all return.

`load_trace(path_or_bytes)` detects the format and loads it (load.py); base.py holds the shared
types and field checks; limits.py what a trace may expand to (`TraceLimits`); requests.py,
mooncake.py, kv_events.py and ops.py are the four formats.
"""

from radix.traces.base import Trace, TraceError, TraceRequest, to_req
from radix.traces.limits import TraceLimits
from radix.traces.load import detect_format, load_trace

__all__ = ["Trace", "TraceError", "TraceLimits", "TraceRequest", "detect_format", "load_trace",
           "to_req"]
