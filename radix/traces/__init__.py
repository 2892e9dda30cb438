"""Trace files: one loader per format, and the `Trace` they all return.

`load_trace(path_or_bytes)` (base.py) detects the format and hands the file to its loader:
requests.py (the project's own request format, also written there), mooncake.py, kv_events.py
and ops.py. What they share is a file each: trace.py (`Trace`, `TraceRequest`, a request's
`Req`), fields.py (`TraceError` and the field checks), limits.py (`TraceLimits` and the `Tally`
that counts against them) and reading.py (gunzip, UTF-8, JSON Lines).
"""

from radix.traces.base import detect_format, load_trace
from radix.traces.fields import TraceError
from radix.traces.limits import TraceLimits
from radix.traces.trace import Trace, TraceRequest, to_req

__all__ = ["Trace", "TraceError", "TraceLimits", "TraceRequest", "detect_format", "load_trace",
           "to_req"]
