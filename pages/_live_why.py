"""The Live page's "Why did this prompt miss?" panel: two requests run here, or two typed
prompts, compared through the model's tokenizer (scenarios/why.py `compare_live`).

Not a page (app.py does not list it): pages/live.py calls `show_live_why`.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._trace_why import draw_pair
from scenarios.why import compare_live

TYPED = "two typed prompts"


def _messages(system: str, message: str) -> list[dict]:
    head = [{"role": "system", "content": system}] if system.strip() else []
    return head + [{"role": "user", "content": message}]


def show_live_why(session: Any, system: str) -> None:
    with st.expander("Why did this prompt miss? Compare two requests or two prompts",
                     key="live.why", on_change="rerun"):
        if not st.session_state.get("live.why"):
            return
        ran = {r.rid: r for r in session.requests if r.token_ids}
        choices = [TYPED, *ran]
        c = st.columns(2)
        a = c[0].selectbox("A: cached first", choices, key="live.why_a")
        b = c[1].selectbox("B: the prompt that missed", choices, key="live.why_b")
        if a == TYPED or b == TYPED:
            t = st.columns(2)
            sys_a = t[0].text_area("A: system prompt", system, key="live.why_sys_a")
            msg_a = t[0].text_input("A: message", "Where is my order?", key="live.why_msg_a")
            sys_b = t[1].text_area("B: system prompt", system, key="live.why_sys_b")
            msg_b = t[1].text_input("B: message", "Where is my order?", key="live.why_msg_b")
        x = _messages(sys_a, msg_a) if a == TYPED else ran[a]
        y = _messages(sys_b, msg_b) if b == TYPED else ran[b]
        view = compare_live(session.tokenizer, x, y)
        st.code(view.text, language=None)
        draw_pair(view, "live.why_tree")
