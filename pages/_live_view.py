"""The Live page's running view: two fragments, so a poll stays light while requests run.

Not a page (app.py does not list it). `_status` reruns every POLL_S seconds: progress of each
unfinished request (prefill chunks done, the queue ahead, an estimate at the measured rate) and
the engine's last lines (admissions, lock walks, splits). `_pictures` reruns every PICTURES_S:
the tree and vLLM's block grid side by side, the totals and the table; the tree's scene and the
grid are rebuilt only when they changed. subtle: the engine's forward needs the GIL between its
torch ops, so every millisecond of Python a poll spends slows the prefill it reports on.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import streamlit as st

from pages._shell import max_scale, min_font_px, presenter, presenter_fit, say
from radix.runs.costs import LABEL
from viz.blocks import grid_caption
from viz.component import tree_view
from viz.escape import esc_md
from viz.grid_chart import block_grid_chart, grid_height
from viz.live import live_scene, progress_line, request_rows, told_lines, totals
from viz.words import named_nodes, node_line

POLL_S = 0.8  # seconds between refreshes of the progress and the lines while requests run
PICTURES_S = 2.5  # ... of the tree, the grid and the table
MAX_CHILDREN = 12  # children drawn per node; the rest fold into one "+K more" box
MAX_DRAWN_NODES = 2_000
HISTORY = 120  # trees kept for the slides export
# presenter mode: the tree under the title, the last line and the tree's caption ends above the
# 800 px fold (issue 41 item 7: 391 px under two more lines ran to 851 px)
TREE_PX_PRESENTER = 330


def show_session(session: Any, polling: bool, measured: str) -> None:
    """The session's progress, lines, pictures and table; refreshed while `polling`."""

    @st.fragment(run_every=POLL_S if polling else None)
    def _status() -> None:
        session.poll()
        if polling and not session.pending:
            st.rerun(scope="app")  # all done: redraw once more without the timers
        rate = session.prefill_rate()
        for p in session.progress()[:4]:
            frac, text = progress_line(p, rate)
            st.progress(min(max(frac, 0.0), 1.0), text=esc_md(text))
        # on a projector the pictures come first: the earlier lines go under them
        older = 0 if presenter() else 8
        lines = told_lines(session.tree.told(older + 1), session.tree.owners())
        say("info", lines[-1] if lines else "No events yet: run a scenario or a prompt.")
        if len(lines) > 1:
            st.text("\n".join(lines[:-1][::-1]))

    @st.fragment(run_every=PICTURES_S if polling else None)
    def _pictures() -> None:
        left, right = st.columns([3, 2])
        with left:
            _tree(session)
        with right:
            _blocks(session)
        if presenter():  # the lines before the last one (above the pictures off a projector)
            lines = told_lines(session.tree.told(3), session.tree.owners())
            if len(lines) > 1:
                st.text("\n".join(lines[:-1][::-1]))
        _table(session, measured)

    _status()
    _pictures()


def _tree(session: Any) -> None:
    snap = session.tree.snapshot()
    selected = st.session_state.get("live.selected")
    fit = presenter_fit(0.6, TREE_PX_PRESENTER)  # the left of columns [3, 2]
    cached = st.session_state.get("live.scene")
    if cached is None or cached[0] != (snap.step, session.tree.num_events, selected, fit):
        told = told_lines(session.tree.told(1), session.tree.owners())
        named = named_nodes(told[-1].split(": ", 1)[-1]) if told else set()
        scene = live_scene(snap, session.decode, selected, MAX_CHILDREN, fit, keep=named)
        cached = st.session_state["live.scene"] = ((snap.step, session.tree.num_events,
                                                    selected, fit), *scene)
    _, scene, drawn, folded = cached
    st.caption(f"Tree: {len(snap.nodes) - 1} nodes, {snap.total_size:,} tokens cached "
               f"({snap.protected_size:,} locked by running requests)."
               + (f" {folded:,} nodes folded into '+K more' boxes." if folded else ""))
    if len(snap.nodes) == 1:
        return  # only the root: nothing to draw yet
    if drawn > MAX_DRAWN_NODES:
        st.info(f"{drawn:,} nodes: too many to draw; reset to start over.")
        return
    history = st.session_state.setdefault("live.scenes", deque(maxlen=HISTORY))
    if not history or history[-1][0] != snap.step:  # the tree changed: keep it for the export
        lines = told_lines(session.tree.told(1), session.tree.owners())
        history.append((snap.step, scene, lines[-1].split(": ", 1)[-1] if lines else ""))
    clicked = tree_view(scene, key="live.tree", height=TREE_PX_PRESENTER if presenter() else 340,
                        duration_ms=300,
                        max_scale=max_scale(), min_font_px=min_font_px())
    if clicked is not None:
        st.session_state["live.selected"] = clicked
    node = snap.by_id().get(st.session_state.get("live.selected"))
    if node is not None and node.parent is not None:
        say("caption", node_line(node, session.tree.owners().get(node.id)))
        st.text(session.decode(list(node.token_ids))[:600])


def _blocks(session: Any) -> None:
    snap = session.block_snapshot()
    if snap is None:
        st.caption("vLLM's block pool: waiting for the engine's first snapshot…")
        return
    cached = st.session_state.get("live.grid")
    if cached is None or cached[0] is not snap:
        grid = block_grid_chart(snap, columns=24,
                                stop_text="vLLM's block pool, same requests (shadow)")
        cached = st.session_state["live.grid"] = (snap, grid, grid_caption(snap))
    # keyed ECharts: each new snapshot redraws the grid in place (viz/grid_chart.py)
    st.echarts_chart(cached[1], key="live.blocks", height=grid_height(cached[1]),
                     renderer="svg")
    st.caption(cached[2])


def _table(session: Any, measured: str) -> None:
    t = totals(session.requests)
    m = st.columns(5)
    m[0].metric("requests done", f"{t.finished:,}")
    m[1].metric("matched", f"{t.matched:,} tok")
    m[2].metric("prefilled", f"{t.prefilled:,} tok")
    m[3].metric("hit rate", f"{t.hit_rate:.0%}")
    m[4].metric("saved prefill (derived)", f"{t.saved_prefill_ms:,.1f} ms")
    st.dataframe(request_rows(session.requests, admitted=session.tree.admitted()),
                 hide_index=True)
    st.caption(f"TTFT and decode tok/s: {measured}. Saved prefill and KV: {LABEL}, "
               "pricing each request's matched tokens.")
    for req in session.requests[::-1][:3]:
        state = "done" if req.done else "running"
        say("markdown", f"{req.rid} ({state}, {len(req.output_ids)} tokens)")
        st.text(session.text(req) or "…")
