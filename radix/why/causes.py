"""Detectors for text differences that break a shared prefix: one small function per cause.

Each takes the two texts and `at`, the first character where they differ, and returns a `Cause`
or None. A value detector (date/time, UUID/hex id, counter) fires when a match of its pattern
covers `at` in both texts; a normaliser detector (line endings, NFC, NFKC, whitespace) fires
when normalising both texts carries their agreement past `at` by at least AGREE characters (or
to the end); `reordered_lines` when the lines from `at` on are the same lines in another order.
Leaves out: guessing. No detector fits: the report says "no known cause".
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from radix.why.diff import escape, first_char_diff

AGREE = 8  # characters a normaliser must add to the agreement to count as the cause


class Cause(NamedTuple):
    kind: str  # "date_time", "uuid_hex", "counter", "line_endings", "unicode_nfc", ...
    sentence: str  # what happened, in words, with the two values


DATE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}/\d{1,2}/\d{2,4}|\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp][Mm])?"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? \d{1,2} [A-Z][a-z]+ \d{4}"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2},? \d{4}")
UUID_HEX = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b"
    r"|\b[A-Za-z]+[-_](?=[A-Za-z0-9]*\d)[A-Za-z0-9]{10,}\b")
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _covering(pattern: re.Pattern, text: str, at: int) -> str | None:
    """The match of `pattern` in `text` whose span holds position `at`, if any."""
    lo = max(0, at - 64)
    for m in pattern.finditer(text, lo, at + 128):
        if m.start() <= at < m.end():
            return m.group()
    return None


def _value(kind: str, pattern: re.Pattern, what: str) -> Callable[[str, str, int], Cause | None]:
    def detect(a: str, b: str, at: int) -> Cause | None:
        va, vb = _covering(pattern, a, at), _covering(pattern, b, at)
        if va is None or vb is None or va == vb:
            return None
        return Cause(kind, f"{what}: A has {va!r}, B has {vb!r}; every token after it is "
                           "computed again. Move it after the shared part (or drop it)")
    detect.__name__ = kind
    return detect


date_time = _value("date_time", DATE_TIME, "a date/time in the prompt")
uuid_hex = _value("uuid_hex", UUID_HEX, "a request id (UUID / hex / random id) in the prompt")
counter = _value("counter", NUMBER, "a number that changes between requests (counter?)")


def _normaliser(kind: str, norm: Callable[[str], str], what: str
                ) -> Callable[[str, str, int], Cause | None]:
    def detect(a: str, b: str, at: int) -> Cause | None:
        na, nb = norm(a), norm(b)
        if na == nb:
            return Cause(kind, f"{what}: A and B are the same text once normalised "
                               f"(A '{escape(a[at:at + 6])}', B '{escape(b[at:at + 6])}')")
        agree, before = first_char_diff(na, nb), len(norm(a[:at]))
        if agree >= before + AGREE or agree == min(len(na), len(nb)):
            return Cause(kind, f"{what}: normalised, A and B agree {agree - before:,} "
                               f"characters further (A '{escape(a[at:at + 6])}', "
                               f"B '{escape(b[at:at + 6])}')")
        return None
    detect.__name__ = kind
    return detect


def _lines(s: str) -> str:
    return s.replace("\r\n", "\n").replace("\r", "\n")


def _spaces(s: str) -> str:
    return re.sub(r"[ \t]+", " ", re.sub(r"[ \t]+(?=\n|$)", "", s))


line_endings = _normaliser("line_endings", _lines, "line endings differ (\\r\\n vs \\n)")
unicode_nfc = _normaliser("unicode_nfc", lambda s: unicodedata.normalize("NFC", s),
                          "Unicode normalisation differs (composed vs decomposed, NFC)")
unicode_nfkc = _normaliser("unicode_nfkc", lambda s: unicodedata.normalize("NFKC", s),
                           "compatibility characters differ (NFKC: e.g. no-break space, "
                           "full-width forms, ligatures)")
whitespace = _normaliser("whitespace", _spaces, "whitespace differs (spaces, tabs, trailing)")


def reordered_lines(a: str, b: str, at: int, max_lines: int = 64) -> Cause | None:
    """The lines from the one holding `at` on: the same lines (or comma-separated items of that
    line) in another order, within `max_lines`.

    >>> reordered_lines("x\\nb\\na\\nq", "x\\na\\nb\\nq", 2).kind
    'reordered'
    """
    start = a.rfind("\n", 0, at) + 1
    la, lb = a[start:].split("\n")[:max_lines], b[start:].split("\n")[:max_lines]
    for w in range(2, min(len(la), len(lb)) + 1):
        if la[:w] != lb[:w] and Counter(la[:w]) == Counter(lb[:w]):
            return Cause("reordered", f"the same {w} lines in another order (a list such as "
                                      f"tools, sorted differently): A starts "
                                      f"'{escape(la[0][:40])}', B '{escape(lb[0][:40])}'")
    ia, ib = la[0].split(", "), lb[0].split(", ") if lb else []
    if len(ia) > 1 and ia != ib and Counter(ia) == Counter(ib):
        return Cause("reordered", f"the same {len(ia)} comma-separated items in another order: "
                                  f"A '{escape(la[0][:48])}', B '{escape(lb[0][:48])}'")
    return None


# Most specific first: a normaliser explains a whole stretch, a value one spot.
TEXT_DETECTORS = (line_endings, unicode_nfc, unicode_nfkc, whitespace, date_time, uuid_hex,
                  counter, reordered_lines)


def text_causes(a: str, b: str) -> list[Cause]:
    """Every text detector that fits where `a` and `b` first differ (none: one text extends
    the other).

    >>> [c.kind for c in text_causes("Today is 2024-05-01.\\nHi", "Today is 2024-06-13.\\nHi")]
    ['date_time']
    """
    at = first_char_diff(a, b)
    if at == min(len(a), len(b)):  # equal, or one extends the other: nothing to explain here
        return []
    found = [c for c in (d(a, b, at) for d in TEXT_DETECTORS) if c is not None]
    if any(c.kind in ("date_time", "uuid_hex") for c in found):  # their digits: no counter
        found = [c for c in found if c.kind != "counter"]
    return found
