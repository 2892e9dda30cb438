"""Mooncake traces (format b), loaded exactly and compactly, in real tokens.

A line (kvcache-ai/Mooncake FAST25-release): {"timestamp": ms, "input_length", "output_length",
"hash_ids": [prefix-chained ids of 512-token blocks]}, ceil(input_length / 512) of them. Hash id
h becomes the real tokens h*512 .. h*512+511 (the last block cut at input_length), held as a
TokenRuns (radix/tokens/): a few runs a request, never one int a token. load_trace counts what
the trace expands to (limits.py's Tally: prompts in hash ids, outputs in tokens).
Leaves out: Mooncake's other trace columns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from radix.tokens import TokenRuns
from radix.traces.fields import (
    MAX_OUTPUT_LEN,
    TraceError,
    as_int,
    as_int_list,
    as_number,
    need,
    type_name,
)
from radix.traces.limits import MAX_TOKENS_PER_REQUEST, MAX_TOTAL_OUTPUT_TOKENS, Tally, TraceLimits
from radix.traces.reading import decode_text, iter_json_lines
from radix.traces.trace import Trace, TraceRequest

BLOCK_TOKENS = 512  # Mooncake's block size: one hash id stands for 512 tokens
# The default cap on a Mooncake trace's output tokens (load_trace): its replies are runs too, so
# they cost compare and simulate runs and spans, not ints (request traces: MAX_TOTAL_OUTPUT_TOKENS)
MAX_TOTAL_OUTPUT_TOKENS_COMPACT = 1 << 24
MAX_HASH_ID = (1 << 54) - 1  # so that every token h*512 + k fits in 63 bits
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def read_mooncake(data: bytes, limits: TraceLimits) -> Trace:
    """load_trace's Mooncake loader: the file's text within `limits` (the default output cap
    raised to MAX_TOTAL_OUTPUT_TOKENS_COMPACT: the replies are runs too), its totals scanned
    before any line is parsed, then each line counted as it is loaded."""
    text = decode_text(data)
    if limits.max_total_output_tokens == MAX_TOTAL_OUTPUT_TOKENS:  # the default: compact
        limits = replace(limits, max_total_output_tokens=MAX_TOTAL_OUTPUT_TOKENS_COMPACT)
    tally = Tally(limits)
    tally.check_lines(text, "max_requests", "requests")
    scan_totals(text, limits)  # the totals before any line is parsed
    return load_mooncake(text, limits.max_tokens_per_request, tally)


def load_mooncake(text: str, max_tokens: int = MAX_TOKENS_PER_REQUEST,
                  tally: Tally | None = None) -> Trace:
    """Parse and validate a Mooncake trace; prompts are TokenRuns of real tokens. `tally`
    (a Tally, radix/traces/limits.py) counts each line, in file order, before its prompt
    is built, and refuses the line that takes a total over its limit.

    rid is "mc-<line>"; arrival is timestamp / 1000 seconds.

    >>> t = load_mooncake('{"timestamp": 40, "input_length": 600, "output_length": 3, '
    ...                   '"hash_ids": [7, 8]}')
    >>> r = t.requests[0]
    >>> r.rid, r.arrival, r.token_ids, t.input_lens
    ('mc-1', 0.04, TokenRuns([(3584, 600)]), [600])
    >>> hash_ids(r.token_ids)
    [7, 8]
    """
    requests = [_request(obj, line, max_tokens, tally) for line, obj in iter_json_lines(text)]
    if not requests:
        raise TraceError("no requests in the file")
    requests.sort(key=lambda r: r.arrival)  # stable: equal timestamps keep file order
    return Trace("mooncake", requests, input_lens=[len(r.token_ids) for r in requests])


def _request(obj: Any, line: int, max_tokens: int, tally: Tally | None) -> TraceRequest:
    """One line's object -> TraceRequest (prompt as TokenRuns), or a TraceError naming the
    line and the field."""
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
    if tally is not None:  # prompts count in hash ids (units), outputs in tokens
        tally.add_request(line, num_blocks, output_len, "hash_ids", "output_length")
    ids = as_int_list(raw, line, "hash_ids", num_blocks, hi=MAX_HASH_ID)
    tokens = TokenRuns.from_blocks(ids, BLOCK_TOKENS, input_len)
    return TraceRequest(f"mc-{line}", ms / 1000.0, tokens, output_len)


_TOTALS = re.compile(r'"(input_length|output_length)"\s*:\s*(\d{1,19})\b')


def scan_totals(text: str, limits: TraceLimits) -> None:
    r"""Refuses a trace whose prompt (hash ids) or output totals pass `limits`, before any line
    is parsed: a regular-expression pass over the text (a 27 MB trace in well under a second,
    where parsing takes many), naming the line that crosses the limit, as the parse would.

    subtle: it reads the numbers where the fields stand; a line that is bad JSON or repeats a
    field is refused by the parse in any case (only the message may differ).

    >>> lim = TraceLimits(max_total_output_tokens=15)
    >>> try:
    ...     scan_totals('{"input_length": 9, "output_length": 8}\n' * 2, lim)
    ... except TraceError as err:
    ...     print(err.line, err.field)
    2 output_length
    """
    units = outputs = 0
    for m in _TOTALS.finditer(text):
        value = int(m.group(2))
        if m.group(1) == "output_length":
            outputs += value
            total, limit, what = outputs, "max_total_output_tokens", "output tokens"
        else:
            units += -(-value // BLOCK_TOKENS)
            total, limit, what = units, "max_total_tokens", "prompt tokens"
        cap = getattr(limits, limit)
        if total > cap:
            field = m.group(1) if what == "output tokens" else "hash_ids"
            raise TraceError(f"the trace's {what} reach {total:,}, over the limit of {cap:,} "
                             f"({limit})", text.count("\n", 0, m.start()) + 1, field)


def hash_ids(tokens: TokenRuns, block_tokens: int = BLOCK_TOKENS) -> list[int]:
    """The Mooncake hash ids a prompt was made of (its first token of each block // 512).

    >>> hash_ids(TokenRuns.from_blocks([5, 1, 2], 512, 1200))
    [5, 1, 2]
    """
    return [tokens[i] // block_tokens for i in range(0, len(tokens), block_tokens)]


def block_hit_rate(requests: Iterable[TraceRequest]) -> tuple[int, int]:
    """(hit, total) block references with an unbounded prefix-chained cache: a reference hits
    when the same chain of ids up to and including it was seen in an earlier request.

    An oracle for replays of Mooncake traces (a trie keyed by (parent, id)).

    >>> reqs = [TraceRequest("a", 0, TokenRuns.from_blocks((1, 2, 3), 512, 1536), 1),
    ...         TraceRequest("b", 0, TokenRuns.from_blocks((1, 2, 9), 512, 1536), 1),
    ...         TraceRequest("c", 0, TokenRuns.from_blocks((5, 2), 512, 1024), 1)]
    >>> block_hit_rate(reqs)  # b hits 1, 2; c's 2 follows 5, not 1: a miss
    (2, 8)
    """
    children: dict[tuple[int, int], int] = {}
    hit = total = 0
    for req in requests:
        node = 0
        for block in hash_ids(req.token_ids):
            total += 1
            child = children.get((node, block))
            if child is None:
                child = children[(node, block)] = len(children) + 1
            else:
                hit += 1
            node = child
    return hit, total
