"""Words for the T-LRU question (scenarios/tlru.py): the leaves under T-LRU's rule, both
policies' choices and the sentence why. Follows SGLang 0.5.23's TLRUStrategy and the paper it
cites (Zhang et al., arXiv:2510.15152). Reads a run only; leaves out the tree picture.
"""

from __future__ import annotations

from typing import Any


def popped(items: list[tuple[str, int]]) -> str:
    """Pop order in words.

    >>> popped([("chat-B turn 1", 700), ("chat-C turn 2", 2500)])
    'chat-B turn 1 (700), then chat-C turn 2 (2,500)'
    """
    return ", then ".join(f"{name} ({n:,})" for name, n in items) or "nothing"


def leaf_rows(run: Any) -> list[dict[str, Any]]:
    """One table row per evictable leaf, oldest first."""
    return [{"leaf": x.name, "tokens": x.num_tokens, "history L": x.history_len,
             "cached above": x.cached_above,
             f"next prefill if it goes (L - above + {run.next_prompt:,})": x.reprefill,
             "TEL-safe": "yes" if x.tel_safe else "no", "last access": x.last_access_time}
            for x in run.leaves]


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def why_line(run: Any) -> str:
    """Why T-LRU and LRU choose as they do: which tails are TEL-safe and what that means.

    A leaf is TEL-safe when, without it, its conversation's next prefill (the branch's history
    L, less what stays cached above the leaf, plus the next prompt Q) still fits the TTFT budget
    (threshold): evicting it cannot make that conversation's next turn slow, so T-LRU treats it
    as infinitely old and drains such leaves first, oldest first; then plain LRU.
    """
    safe = [x for x in run.leaves if x.tel_safe]
    unsafe = [x for x in run.leaves if not x.tel_safe]
    budget = (f"the TTFT budget is {run.threshold:,} tokens and the next prompt is estimated "
              f"at {run.next_prompt:,}")
    if not safe:
        head = (f"No leaf is TEL-safe ({budget}): every conversation's next prefill would "
                "exceed the budget without its tail, so T-LRU falls back to plain LRU.")
    else:
        tails = _join([f"{x.name} (next prefill {x.reprefill:,} <= {run.threshold:,})"
                       for x in safe])
        head = (f"TEL-safe ({budget}): {tails}. Each lies past the first L + "
                f"{run.next_prompt:,} - {run.threshold:,} tokens of its branch (L: the branch's "
                "history, its high-water length), so losing it cannot push that conversation's "
                "next prefill past the budget: T-LRU counts these tails as infinitely old and "
                "evicts them first, least recently used first.")
    if unsafe:
        head += " Not TEL-safe: " + _join(
            [f"{x.name} (next prefill {x.reprefill:,} > {run.threshold:,})" for x in unsafe]) + "."
    same = run.lru == run.tlru
    verdict = ("Here both evict the same leaves." if same else
               f"So LRU evicts {popped(run.lru)} and T-LRU {popped(run.tlru)}.")
    return f"{head} {verdict}"
