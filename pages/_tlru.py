"""The Eviction lab's T-LRU section: threshold and next-prompt estimate as widgets, the leaves
under T-LRU's rule, LRU's and T-LRU's choices and the sentence why. Not a page: eviction.py
calls `section()`; `params()` gives the lab's own tlru run the same two numbers.
"""

from __future__ import annotations

import streamlit as st

import scenarios.tlru as tq
from pages._shell import say
from viz.tlru import leaf_rows, popped, why_line

KEYS = ("eviction.tlru.threshold", "eviction.tlru.next_prompt")


def params() -> tuple[int, int]:
    """The widgets' values (SGLang's help example until they are set)."""
    return (int(st.session_state.get(KEYS[0], tq.THRESHOLD)),
            int(st.session_state.get(KEYS[1], tq.NEXT_PROMPT)))


@st.cache_resource(max_entries=16)
def _run(threshold: int, next_prompt: int) -> tq.TLRURun:
    return tq.run_tlru(threshold, next_prompt)


def section() -> None:
    st.subheader(f"T-LRU vs LRU: three finished chats, {tq.TO_FREE:,} tokens must go")
    st.caption("T-LRU (SGLang 0.5.23, --radix-eviction-policy tlru, unified cache only) keeps "
               "what a conversation's next turn needs to start within a TTFT budget. Defaults: "
               "the example in SGLang's --radix-eviction-policy-config help; the class's own "
               "defaults (0, 0) would make it plain LRU, and the server refuses threshold <= "
               "estimate.")
    c = st.columns(2)
    threshold = c[0].number_input("T-LRU threshold (TTFT budget, tokens)", 1, tq.LIMIT,
                                  tq.THRESHOLD, step=256, key=KEYS[0])
    next_prompt = c[1].number_input("next-prompt estimate (tokens)", 0, tq.LIMIT,
                                    tq.NEXT_PROMPT, step=64, key=KEYS[1])
    try:
        tq.check_params(int(threshold), int(next_prompt))
    except ValueError as exc:
        say("error", f"T-LRU settings: {exc}")
        return
    run = _run(int(threshold), int(next_prompt))
    st.dataframe(leaf_rows(run), hide_index=True)
    for col, name, items in zip(st.columns(2), ("LRU", "T-LRU"), (run.lru, run.tlru)):
        with col:
            say("markdown", f"{name} evicts: {popped(items)}")
    say("info", why_line(run))
