"""Hash-id traces (Mooncake) shown as the trace has them: hash ids and block numbers.

The caches hold a Mooncake prompt in real tokens: hash id h is tokens h*512 .. h*512+511
(mooncake.py), so token ids are hash ids x 512 and mean nothing to a reader of the trace.
`block_label` names a stretch of such tokens by the trace's hash ids (`#7 #8 #9[0:176]`: a
partial block with the token range of it the stretch covers), `stretch_hash_ids` gives the ids
of a stretch at a prompt offset, `block_span` a token range as block numbers of the prompt.
A simulated reply (tokens past every hash id, radix/traces/trace.py) shows as `reply`.
Leaves out: request traces, whose token ids are shown as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from radix.tokens import TokenRuns
from radix.traces.mooncake import BLOCK_TOKENS, MAX_HASH_ID

FIRST_REPLY_TOKEN = (MAX_HASH_ID + 1) * BLOCK_TOKENS  # past every prompt token of a trace


def _runs(tokens: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """(first token, length) runs of consecutive ids, over at most `limit` tokens."""
    if isinstance(tokens, TokenRuns):
        return list(tokens[:limit].runs()) if len(tokens) > limit else list(tokens.runs())
    return list(TokenRuns.from_ids(list(tokens[:limit])).runs())


def block_label(tokens: Sequence[int], max_blocks: int = 6) -> str:
    """The hash ids a stretch of tokens is made of; a cut block with the part of it covered.

    >>> block_label(TokenRuns.from_blocks([7, 8, 9], 512, 1200))
    '#7 #8 #9[0:176]'
    >>> block_label(TokenRuns.from_blocks([7, 3], 512, 1024)[100:])  # a split mid-block
    '#7[100:512] #3'
    >>> block_label(TokenRuns.from_blocks(range(10), 512, 5120), max_blocks=2)
    '#0 #1 … (10 blocks)'
    >>> block_label(TokenRuns([(FIRST_REPLY_TOKEN + 5, 40)]))
    'reply (40 tokens)'
    """
    pieces: list[str] = []
    reply = 0
    for start, length in _runs(tokens, (max_blocks + 1) * BLOCK_TOKENS):
        if start >= FIRST_REPLY_TOKEN:
            reply += length
            continue
        t, end = start, start + length
        while t < end:
            h, off = divmod(t, BLOCK_TOKENS)
            n = min(end - t, BLOCK_TOKENS - off)
            pieces.append(f"#{h}" if n == BLOCK_TOKENS else f"#{h}[{off}:{off + n}]")
            t += n
    text = " ".join(pieces[:max_blocks])
    if len(pieces) > max_blocks:
        total = -(-len(tokens) // BLOCK_TOKENS)
        text += f" … ({total:,} blocks)"
    if reply:
        text = (text + " + " if text else "") + f"reply ({reply:,} tokens)"
    return text


def stretch_hash_ids(tokens: Sequence[int], start: int, end: int, max_ids: int = 8) -> list[int]:
    """The hash ids of the blocks prompt tokens [start, end) touch (at most `max_ids`).

    >>> p = TokenRuns.from_blocks([7, 8, 9, 4], 512, 2048)
    >>> stretch_hash_ids(p, 700, 1600), stretch_hash_ids(p, 1024, 1536)  # blocks 1-3; 2
    ([8, 9, 4], [9])
    """
    first = start - start % BLOCK_TOKENS
    positions = range(max(first, start), end, BLOCK_TOKENS) if start == first else \
        [start, *range(first + BLOCK_TOKENS, end, BLOCK_TOKENS)]
    return [tokens[i] // BLOCK_TOKENS for i in list(positions)[:max_ids]
            if tokens[i] < FIRST_REPLY_TOKEN]


def block_span(start: int, end: int) -> str:
    """Prompt tokens [start, end) as the blocks of the prompt they fall in.

    >>> block_span(700, 1600), block_span(0, 512)
    ('blocks 1-3', 'block 0')
    """
    lo, hi = start // BLOCK_TOKENS, max(start, end - 1) // BLOCK_TOKENS
    return f"block {lo}" if lo == hi else f"blocks {lo}-{hi}"
