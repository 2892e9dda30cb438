"""The Eviction lab's host tier section: three requests through SGLang's HiCache, the tree
coloured by tier at each step (the animated tree view), the demotion and the load back in
words; a slider steps through the request's tier moves one at a time (the moved node outlined
and its move played), ending on the request's end.
Not a page: eviction.py calls `section()`.
"""

from __future__ import annotations

import streamlit as st

import scenarios.hosttier as ht
from pages._shell import max_scale, min_font_px, say, say_list, tier_tree_height
from viz.component import tree_view
from viz.hosttier import TIER_LEGEND, event_line, served_line, tier_scene


@st.cache_resource(max_entries=1)
def _walk() -> tuple[list[ht.TierStep], list[ht.TierFrame]]:
    return ht.run_walk(), ht.run_frames()


def section() -> None:
    st.subheader("The host tier (HiCache): evicted KV is demoted to host, then loaded back")
    st.caption(f"SGLang 0.5.23 with --enable-hierarchical-cache, --hicache-ratio {ht.RATIO:g}, "
               f"write-through: a device of {ht.DEVICE} tokens, a host pool of twice that. "
               + TIER_LEGEND)
    steps, frames = _walk()
    k = st.radio("request", range(len(steps)), format_func=lambda i: steps[i].title,
                 horizontal=True, key="eviction.hosttier.step")
    step = steps[k]
    say("markdown", served_line(step), bold="Served.")
    left, right = st.columns([3, 2])
    mine = [f for f in frames if f.request == k]
    with left:
        j = len(mine) - 1
        if len(mine) > 1:
            j = st.select_slider("move", range(len(mine)), value=j,
                                 key=f"eviction.hosttier.move.{k}",
                                 format_func=lambda i: type(mine[i].event).__name__)
        f = mine[j]
        say("caption", event_line(f.event) or "")
        tree_view(tier_scene(f.nodes, f.moved, f.event), key="eviction.hosttier.tree",
                  height=tier_tree_height(), max_scale=max_scale(),
                  min_font_px=min_font_px())
    with right:
        m = st.columns(2)
        m[0].metric("device free", f"{step.device_free:,} tok")
        m[1].metric("host used", f"{step.host_used:,} tok")
        lines = [x for x in (event_line(e) for e in step.events) if x]
        say_list(lines, empty="nothing moved")
