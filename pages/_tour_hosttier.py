"""The Tour's host tier walk: scenarios/hosttier.py's three chats one tier event at a time, the
tree coloured by tier (device / device + host / host) in the animated tree view, the node each
event moves outlined in red and its move played (a demotion's copy slides down to the host, a
load back's rises to the device): chat A backed up, demoted when chat B needs its slots, loaded
back when A returns. Not a page: tour.py calls `show()` when the walk is
scenarios.hosttier.TOUR_WALK.
The slides export carries the tier-coloured tree, its moves and each frame's words
(viz/hosttier.py's export_frame), with the colours' legend under the title.
Leaves out: vLLM's blocks beside it (vLLM 0.33's CPU offloading is a connector, not its
prefix cache).
"""

from __future__ import annotations

import streamlit as st

import scenarios.hosttier as ht
from pages._player import Player, export_panel
from pages._shell import max_scale, min_font_px, presenter, say, tier_tree_height
from viz.component import tree_view
from viz.hosttier import (
    TIER_LEGEND,
    TIER_WORDS,
    event_line,
    export_frame,
    frame_line,
    last_of_request,
    served_line,
    tier_scene,
)


@st.cache_resource(max_entries=1)
def _walk() -> tuple[list[ht.TierStep], list[ht.TierFrame]]:
    return ht.run_walk(), ht.run_frames()


def show() -> None:
    steps, frames = _walk()
    player = Player("tour.host-tier", len(frames), page="tour")
    player.buttons()

    def _show(i: int, duration_ms: int) -> None:
        f = frames[i]
        if not presenter():
            st.markdown(f"**Event {i} / {len(frames) - 1}**")
        say("info", frame_line(f, steps))
        left, right = st.columns([3, 2])
        with left:
            tree_view(tier_scene(f.nodes, f.moved, f.event), key="tour.host-tier.tree",
                      height=tier_tree_height(), duration_ms=duration_ms,
                      max_scale=max_scale(), min_font_px=min_font_px())
            if not presenter():
                st.caption(TIER_LEGEND)
        with right:
            tiers = [n.tier for n in f.nodes if n.parent is not None]
            m = st.columns(3)
            for col, tier in zip(m, ("device", "both", "host")):
                col.metric(TIER_WORDS[tier], f"{tiers.count(tier)} node(s)")
            if f.request >= 0 and last_of_request(frames, i):
                say("markdown", served_line(steps[f.request]), bold="Served.")
            done = [event_line(g.event) for g in frames[1:i + 1] if g.request == f.request]
            if done:
                say("caption", "So far for this request: " + "; ".join(done))

    player.frames(_show)

    with export_panel("export frames for slides (animated HTML)", "tour_tier") as open_:
        if open_:
            player.export(ht.TOUR_WALK, lambda i: export_frame(frames, steps, i),
                          note=TIER_LEGEND)
