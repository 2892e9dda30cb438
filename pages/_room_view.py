"""The Classroom page's shared view: the room's tree, its block pool and its prompts, live.

Not a page. One fragment reruns every REFRESH_S seconds: it takes in the engine's news
(`room.pump()`) and rebuilds the tree's scene, the grid and the table only when the room's
version moved. Everyone in a room sees the same pictures; a student's own prompts carry a star.
A presenter's tree is folded to keep 14 px labels (`fitted_scene`), once per version for every
presenter; its table is a plain one, every cell wrapped, the shared system prompt once above.
"""

from __future__ import annotations

import threading
from typing import Any

import streamlit as st

from pages._shell import max_scale, min_font_px, presenter, presenter_fit, say, tree_height
from scenarios.room import SYSTEM
from viz.blocks import grid_caption
from viz.classroom import ask_rows, room_counts, status_line
from viz.component import tree_view
from viz.grid_chart import block_grid_chart, grid_height
from viz.live import live_scene, told_lines

REFRESH_S = 0.5  # the shared view's refresh: a change shows within about this long
MAX_CHILDREN = 12  # children drawn per node; the rest fold into "+K more"


# room code -> (version, the view every viewer of that version shares): built once per
# version, not once per open browser (30 students each laying out the same tree fell seconds
# behind one another), and read from one moment, so no two parts of it contradict
_SHARED: dict[str, tuple[int, dict[str, Any]]] = {}
_SHARED_LOCK = threading.Lock()


def show_room(room: Any, sid: str) -> None:
    """The shared pictures and table of `room`, refreshed while the page is open."""

    @st.fragment(run_every=REFRESH_S)
    def _view() -> None:
        if room.closed:
            say("warning", f"Room {room.code} has closed.")
            _SHARED.pop(room.code, None)
            return
        version = room.pump()
        fit = presenter_fit(0.6, tree_height(320))  # the left of columns [3, 2]
        kept = st.session_state.get("classroom.view")
        if kept is None or kept[0] != (room.code, version, fit):
            shared = shared_view(room, version)
            view = dict(shared)
            if fit is not None and view["scene"] is not None:
                view["scene"] = fitted_scene(shared, fit)
            view["rows"] = ask_rows(view["asks"], room.session.text, mine=sid,
                                    states=view["states"])
            kept = st.session_state["classroom.view"] = ((room.code, version, fit), view)
        _draw(kept[1])

    _view()


def shared_view(room: Any, version: int) -> dict[str, Any]:
    """The view of `room` at `version`, built by the first viewer to ask for it."""
    with _SHARED_LOCK:
        held = _SHARED.get(room.code)
        if held is None or held[0] < version:
            held = _SHARED[room.code] = (version, _build(room))
        return held[1]


def fitted_scene(shared: dict[str, Any], fit: tuple[float, float, float]) -> dict[str, Any]:
    """The shared view's tree folded to fit a presenter's view (live_scene's `fit`), from the
    same snapshot as the rest of the view; built once per version for every presenter."""
    with _SHARED_LOCK:
        held = shared.get("fitted")
        if held is None or held[0] != fit:
            scene = live_scene(shared["snapshot"], shared["decode"], None, MAX_CHILDREN, fit)[0]
            held = shared["fitted"] = (fit, scene)
        return held[1]


def _build(room: Any) -> dict[str, Any]:
    session, asks = room.session, room.rows()
    states = [a.state for a in asks]  # read once: the line and the table agree
    snap = session.tree.snapshot()
    scene = live_scene(snap, session.decode, None, MAX_CHILDREN)[0] if len(snap.nodes) > 1 \
        else None
    blocks = session.block_snapshot()
    lines = told_lines(session.tree.told(3), session.tree.owners())
    return {
        "line": status_line(room.code, room.paused, room_counts(asks, states)),
        "told": lines[-1] if lines else "No events yet: ask a question.",
        "tree": (f"Tree: {len(snap.nodes) - 1} nodes, {snap.total_size:,} tokens cached "
                 f"({snap.protected_size:,} locked by running requests)."),
        "scene": scene, "snapshot": snap, "decode": session.decode,
        "grid": None if blocks is None else (
            block_grid_chart(blocks, columns=24, stop_text="vLLM's block pool, same requests"),
            grid_caption(blocks)),
        "asks": asks, "states": states,
    }


def _draw(view: dict[str, Any]) -> None:
    say("info", view["line"])
    if not presenter():
        say("caption", view["told"])
    left, right = st.columns([3, 2])
    with left:
        st.caption(view["tree"])
        if view["scene"] is not None:
            tree_view(view["scene"], key="classroom.tree", height=tree_height(320),
                      duration_ms=300, max_scale=max_scale(), min_font_px=min_font_px())
        else:  # in the tree's place, so an emptied tree does not linger beside "0 nodes"
            st.info("The tree is empty: the first question starts it.")
    with right:
        if view["grid"] is None:
            st.caption("vLLM's block pool: waiting for the engine's first snapshot…")
        else:
            # keyed ECharts: each refresh redraws the grid in place (viz/grid_chart.py)
            st.echarts_chart(view["grid"][0], key="classroom.blocks",
                             height=grid_height(view["grid"][0]), renderer="svg")
            st.caption(view["grid"][1])
    say("caption", f"Every question goes to the model after the room's shared system prompt: "
                   f"\"{SYSTEM}\" (in the tree: the first node every prompt shares).")
    if presenter():  # on a projector: every cell wrapped, the whole answer on screen
        st.table(view["rows"], hide_index=True)
    else:
        st.dataframe(view["rows"], hide_index=True, key="classroom.rows")
