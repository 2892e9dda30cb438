"""Mooncake traces (format b), loaded as a block-unit trace.

Schema, a line (kvcache-ai/Mooncake FAST25-release traces):
  {"timestamp": ms since the first request, "input_length": tokens, "output_length": tokens,
   "hash_ids": [ids of 512-token blocks]}, len(hash_ids) == ceil(input_length / 512).
Hash ids are prefix-chained: equal ids at equal positions of two requests stand for the same
block. Expanding each id into 512 real tokens would make 62M tokens of the 3,993-request sample,
so each id becomes ONE unit token: `Trace.token_scale` = 512, `Trace.input_lens` keeps the real
input_length (the last block is partial), and `Trace.real_prefix_len` converts a unit count back
into real tokens. output_len stays in real tokens. Leaves out: Mooncake's other trace columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from radix.traces.base import (
    MAX_OUTPUT_LEN,
    Trace,
    TraceError,
    TraceRequest,
    as_int,
    as_int_list,
    as_number,
    iter_json_lines,
    need,
    type_name,
)

BLOCK_TOKENS = 512  # Mooncake's block size: one hash id stands for 512 tokens
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def load_mooncake(text: str, max_tokens: int = 1 << 20) -> Trace:
    """Parse and validate a Mooncake trace into unit tokens (one per hash id).

    rid is "mc-<line>"; arrival is timestamp / 1000 seconds.

    >>> t = load_mooncake('{"timestamp": 40, "input_length": 600, "output_length": 3, '
    ...                   '"hash_ids": [7, 8]}')
    >>> r = t.requests[0]
    >>> r.rid, r.arrival, r.token_ids, t.input_lens, t.token_scale
    ('mc-1', 0.04, (7, 8), [600], 512)
    """
    requests: list[TraceRequest] = []
    input_lens: list[int] = []
    for line, obj in iter_json_lines(text):
        if not isinstance(obj, dict):
            raise TraceError(f"expected a JSON object, got {type_name(obj)}", line)
        unknown = sorted(set(obj) - set(FIELDS))
        if unknown:
            raise TraceError(f"unknown field (known: {', '.join(FIELDS)})", line, unknown[0])
        ms = as_number(need(obj, "timestamp", line), line, "timestamp", 0.0, 1e12)
        input_len = as_int(need(obj, "input_length", line), line, "input_length", 1, max_tokens)
        output_len = as_int(need(obj, "output_length", line), line, "output_length", 0,
                            MAX_OUTPUT_LEN)
        num_blocks = math.ceil(input_len / BLOCK_TOKENS)
        raw = need(obj, "hash_ids", line)
        if isinstance(raw, list) and len(raw) != num_blocks:
            raise TraceError(f"{len(raw)} ids for input_length {input_len}; expected "
                             f"ceil({input_len} / {BLOCK_TOKENS}) = {num_blocks}", line, "hash_ids")
        hash_ids = as_int_list(raw, line, "hash_ids", num_blocks, hi=2 ** 63 - 1)
        requests.append(TraceRequest(f"mc-{line}", ms / 1000.0, hash_ids, output_len))
        input_lens.append(input_len)
    if not requests:
        raise TraceError("no requests in the file")
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival)
    return Trace("mooncake", [requests[i] for i in order], token_scale=BLOCK_TOKENS,
                 input_lens=[input_lens[i] for i in order])


def block_hit_rate(requests: Iterable[TraceRequest]) -> tuple[int, int]:
    """(hit, total) block references with an unbounded prefix-chained cache: a reference hits
    when the same chain of ids up to and including it was seen in an earlier request.

    An oracle for the radix tree's unit-token replay (a trie keyed by (parent, id)).

    >>> reqs = [TraceRequest("a", 0, (1, 2, 3), 1), TraceRequest("b", 0, (1, 2, 9), 1),
    ...         TraceRequest("c", 0, (5, 2), 1)]
    >>> block_hit_rate(reqs)  # b hits 1, 2; c's 2 follows 5, not 1: a miss
    (2, 8)
    """
    children: dict[tuple[int, int], int] = {}
    hit = total = 0
    for req in requests:
        node = 0
        for block in req.token_ids:
            total += 1
            child = children.get((node, block))
            if child is None:
                child = children[(node, block)] = len(children) + 1
            else:
                hit += 1
            node = child
    return hit, total
