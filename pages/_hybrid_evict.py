"""The Eviction lab's component section: SGLang's component tree (FULL + SWA + MAMBA) asked to free
full tokens, SWA tokens or Mamba states (scenarios/hybrid_evict.py), each node's components
drawn (viz/hybrid.py), a slider through the call's tombstones and deletions one at a time,
each said with its rule (viz/hybrid_evict.py), and each component's evictable and protected
sizes before and after. Not a page: eviction.py calls `section()`.
"""

from __future__ import annotations

import streamlit as st

import scenarios.hybrid_evict as hx
from pages._shell import max_scale, min_font_px, presenter, presenter_fit, say
from viz.component import tree_view
from viz.hybrid import component_scene
from viz.hybrid_evict import UNITS, frame_line, frame_roles

KEY = "eviction.hybrid"


@st.cache_resource(max_entries=16)
def _run(ask: str, amount: int, live: bool) -> hx.LabRun:
    return hx.run_lab(ask, amount, live)


def section() -> None:
    st.subheader("Hybrid models: each component evicts its own way")
    st.caption(f"SGLang 0.5.23's component tree for a model with sliding-window and Mamba layers "
               f"(window {hx.WINDOW}, Mamba checkpoints every {hx.GRID} tokens). Requests: chat "
               "A, chat A2 (A's first 40 tokens: a state kept at 40), chat A's second turn, "
               "chat B (a state kept at the end of S), a RAG request, then chat C. Each node: "
               "its FULL lock, its SWA window or tombstone, its Mamba state or tombstone.")
    c = st.columns([2, 1, 1.4])
    ask = c[0].radio("what the admission must free", list(hx.ASKS), horizontal=True,
                     format_func=lambda a: hx.ASKS[a], key=f"{KEY}.ask")
    amount = c[1].number_input(UNITS[ask], 1, hx.LIMIT, hx.DEFAULT_AMOUNT[ask],
                               key=f"{KEY}.amount.{ask}")
    live = c[2].toggle("chat C still running", True, key=f"{KEY}.live")
    try:
        hx.check_params(ask, int(amount))
    except ValueError as exc:
        say("error", f"component eviction: {exc}")
        return
    run = _run(ask, int(amount), bool(live))
    n = len(run.frames)
    k = st.select_slider("event", range(n), value=n - 1, key=f"{KEY}.k.{ask}.{amount}.{live}",
                         format_func=lambda i: "before" if i == 0 else f"{i} of {n - 1}")
    say("info", frame_line(run, k))
    # presenter mode: its 5 levels of three-line boxes at 14 px take ~560 px (a lecturer
    # scrolls to this section: the tree fills the projector, nothing folded or panned)
    px = 560 if presenter() else 420
    scene = component_scene(run.frames[k].nodes, run.components, frame_roles(run, k),
                            presenter_fit(1.0, px))
    tree_view(scene, key=f"{KEY}.tree", height=px, max_scale=max_scale(),
              min_font_px=min_font_px())
    before, after = run.sizes
    m = st.columns(3)
    for col, comp in zip(m, ("full", "swa", "mamba")):
        (e0, p0), (e1, _) = before[comp], after[comp]
        col.metric(f"{UNITS[comp]} evictable (protected {p0:,})", f"{e1:,}", f"{e1 - e0:,}",
                   delta_color="off")
