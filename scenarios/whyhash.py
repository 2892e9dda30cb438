"""Why did Mooncake request B miss after A? The comparison in the trace's own units: hash ids.

A Mooncake trace holds no text and no tokens: a prompt is a list of prefix-chained hash ids, one
per 512-token block (radix/traces/mooncake.py turns id h into tokens h*512 .. h*512+511, the
last block cut at input_length). Two requests part at the first block whose id differs; the ids
chain on their prefix, so no later block matches either. What each cache reuses of B comes from
radix/why on those tokens (the real tree and block cache: the last-token rule, vLLM's blocks).
Leaves out: causes (a hash id says nothing of the text behind it) and drawing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix.traces.mooncake import BLOCK_TOKENS, hash_ids
from radix.traces.trace import Trace
from radix.why.prompt import Prompt
from radix.why.report import WhyReport, why

NO_TEXT = "a Mooncake trace holds hash ids only, so the cause is not in it"


class HashView(NamedTuple):
    report: WhyReport  # radix/why on the pair's tokens (what the tree and the blocks reuse)
    ids_a: list[int]  # A's hash ids, one per 512-token block
    ids_b: list[int]
    first: int | None  # the first block whose id differs; None when one list starts the other
    shared: int  # tokens B shares with A from the start
    rows: list[dict[str, Any]]  # one per block of B: block, tokens, A's id, B's id, same id?
    sentence: str  # where they part, and what each cache reuses


def _first_diff(a: list[int], b: list[int]) -> int | None:
    """The first index where `a` and `b` hold different ids; None if one starts the other.

    >>> _first_diff([1, 2, 3], [1, 2, 9, 10]), _first_diff([1, 2], [1, 2, 3])
    (2, None)
    """
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def compare_hash_ids(trace: Trace, rid_a: str, rid_b: str, block_size: int = 16) -> HashView:
    """B (`rid_b`) against A (`rid_a`) cached first, block by block.

    A = ids [1, 2, 3] (1,536 tokens), B = [1, 2, 9, 10] (1,800): block 2 is the first whose id
    differs (3 vs 9), so they share 2 x 512 = 1,024 tokens; both caches reuse 1,024 (B's last
    token, 1,799, lies past them; 1,024 is 64 whole blocks of 16).
    """
    by_rid = {tr.rid: tr for tr in trace.requests}
    for rid in (rid_a, rid_b):
        if rid not in by_rid:
            raise ValueError(f"no request {rid!r} in the trace")
    ta, tb = by_rid[rid_a], by_rid[rid_b]
    ids_a, ids_b = hash_ids(ta.token_ids), hash_ids(tb.token_ids)
    first = _first_diff(ids_a, ids_b)
    r = why(Prompt(f"request {rid_a}", tuple(ta.token_ids)),
            Prompt(f"request {rid_b}", tuple(tb.token_ids)), 1, block_size)
    shared = r.diff.common
    rows = [{"block": i, "tokens": f"[{i * BLOCK_TOKENS:,}, "
                                   f"{min((i + 1) * BLOCK_TOKENS, len(tb.token_ids)):,})",
             "A's id": ids_a[i] if i < len(ids_a) else None, "B's id": h,
             "same id": i < len(ids_a) and ids_a[i] == h} for i, h in enumerate(ids_b)]
    return HashView(r, ids_a, ids_b, first, shared, rows, _sentence(r, ids_a, ids_b, first))


def _sentence(r: WhyReport, ids_a: list[int], ids_b: list[int], first: int | None) -> str:
    if first is not None:
        head = (f"Block {first} (tokens [{first * BLOCK_TOKENS:,}, "
                f"{(first + 1) * BLOCK_TOKENS:,})) is the first whose hash id differs: A has id "
                f"{ids_a[first]}, B has {ids_b[first]}; the ids chain on their prefix, so none "
                f"of B's later blocks matches either. B shares A's first {first:,} blocks")
    elif len(ids_b) <= len(ids_a):
        head = f"Every hash id of B is A's: B's {len(ids_b):,} blocks start A's {len(ids_a):,}"
    else:
        head = f"A's {len(ids_a):,} hash ids start B's {len(ids_b):,}: B goes on past A's end"
    return (f"{head} ({r.diff.common:,} tokens). The tree reuses {r.tree.hit:,} of B's "
            f"{r.diff.len_b:,} tokens, vLLM (blocks of {r.blocks.unit}) {r.blocks.hit:,}; "
            f"{r.blocks.prefilled:,} are prefilled again there. Cause: {NO_TEXT}")
