"""Where two token streams part, and the tokens around that point, marked.

`first_diff` is the length of the common prefix (what an unbounded, page-1 tree could reuse);
`context` shows `width` tokens before and after it, one `[...]` per token, whitespace and
control characters escaped (`\\r`, `\\n`, `\\t`, `\\xa0`), the parting point as ` || `.
Leaves out: the diff past the first difference (the cache never looks there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

Decode = Callable[[list[int]], str]


class TokenDiff(NamedTuple):
    common: int  # tokens the two streams share from the start
    len_a: int
    len_b: int

    @property
    def identical(self) -> bool:
        return self.common == self.len_a == self.len_b


def first_diff(a: Sequence[int], b: Sequence[int]) -> TokenDiff:
    """The common prefix of two token streams.

    >>> first_diff([1, 2, 3, 4], [1, 2, 9])
    TokenDiff(common=2, len_a=4, len_b=3)
    """
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return TokenDiff(k, len(a), len(b))


def first_char_diff(a: str, b: str) -> int:
    """The index of the first character where two texts differ (min length when one is a
    prefix of the other).

    >>> first_char_diff("date: 2024-05-01", "date: 2024-06-13")
    12
    """
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def escape(text: str) -> str:
    """Whitespace other than a plain space, and any non-printable character, made visible.

    >>> escape("a\\r\\nb\\u00a0c")
    'a\\\\r\\\\nb\\\\xa0c'
    """
    out = []
    for ch in text:
        if ch == " " or (ch.isprintable() and not ch.isspace()):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def show_tokens(ids: Sequence[int], decode: Decode | None) -> str:
    """Each token as `[text]` (decoded one by one), or `[#id]` without a tokenizer.

    >>> show_tokens([7, 8], None)
    '[#7][#8]'
    """
    if decode is None:
        return "".join(f"[#{t}]" for t in ids)
    return "".join(f"[{escape(decode([t]))}]" for t in ids)


def context(ids: Sequence[int], at: int, decode: Decode | None, width: int = 6) -> str:
    """`width` tokens before `at`, ` || `, `width` tokens from `at` (ellipses where cut).

    >>> context([1, 2, 3, 4, 5], 2, None, width=1)
    '...[#2] || [#3]...'
    """
    lo, hi = max(0, at - width), min(len(ids), at + width)
    before = show_tokens(ids[lo:at], decode)
    after = show_tokens(ids[at:hi], decode) if at < len(ids) else "(end)"
    return f"{'...' if lo else ''}{before} || {after}{'...' if hi < len(ids) else ''}"
