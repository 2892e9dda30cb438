"""What an explain run may hold, estimated before it starts, and how many processes fit a budget.

The watched run's bytes per request and per prompt token (`estimate`) are the app's (the Trace
debugger reserves them in runtime/budget.py's ledger, which sits above radix); `plan_workers`
is the command line's use of the same figures: `python -m radix explain --memory MB` runs the
what-ifs in as many worker processes as the budget holds (each one holding about what the
watched run holds, plus a Python process), and refuses a trace that does not fit even one.
Leaves out: measuring Python objects exactly (the figures are calibrated, with headroom).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from radix.traces.trace import Trace

# estimates from tracemalloc peaks of the watched run on examples/traces (x 2 for headroom):
# the Mooncake excerpt 3.9 MB (200 requests), rag 7.1 MB (46,169 tokens), customer support
# 5.4 MB (62,125 tokens); 163 KB kept for the excerpt's 200 rows
BYTES_PER_REQUEST = 40_000  # probe rows, tries' nodes, scheduler state
BYTES_PER_TOKEN = 300  # request traces spell every token: the tries keep them as ints
PROCESS_BYTES = 32 * 2**20  # a Python process with radix imported (28 MB max RSS measured)
# the app's process budget (runtime/budget.py PROCESS_MB), the command line's default too
DEFAULT_BUDGET_MB = int(os.environ.get("RADIXLENS_PROCESS_MB", "6144"))


def estimate(trace: Trace) -> int:
    """Bytes the watched run may hold: per request, and per token for request traces (a
    Mooncake request's tokens are runs of 512, held compactly)."""
    n = len(trace.requests)
    if trace.format == "mooncake":
        return BYTES_PER_REQUEST * n
    tokens = sum(trace.input_lens) + sum(r.output_len for r in trace.requests)
    return BYTES_PER_REQUEST * n + BYTES_PER_TOKEN * tokens


class Plan(NamedTuple):
    workers: int  # what-if worker processes (1: the what-ifs run in this process)
    per_process: int  # bytes each process may hold
    total: int  # bytes of all processes together


def plan_workers(per_run: int, jobs: int, budget: int) -> Plan:
    """The most worker processes, up to `jobs`, whose runs of `per_run` bytes (each in a
    process of its own beside this one) fit `budget` bytes; MemoryError with the figures
    when even one run in this process does not.

    >>> MiB = 2**20
    >>> plan_workers(100 * MiB, 8, 600 * MiB).workers  # 1 + 3 processes of 132 MiB: 528 MiB
    3
    >>> plan_workers(100 * MiB, 8, 100 * MiB)
    Traceback (most recent call last):
    ...
    MemoryError: this trace needs about 132 MiB (100 + a process); the budget is 100 MiB
    """
    per_process = per_run + PROCESS_BYTES
    if per_process > budget:
        raise MemoryError(f"this trace needs about {per_process // 2**20:,} MiB "
                          f"({per_run // 2**20:,} + a process); the budget is "
                          f"{budget // 2**20:,} MiB")
    fit = budget // per_process - 1  # beside this process
    workers = max(1, min(jobs, fit))
    total = per_process * (1 + (workers if workers > 1 else 0))
    return Plan(workers, per_process, total)
