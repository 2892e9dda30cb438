"""The Trace debugger's view of one replay: summary, step box and search, the tree at the step.

Not a page (app.py does not list it): pages/trace.py calls `show_replay` once the replay is
ready. The step lives in `trace.at` (steps done: the tree after them); the step box, the slider,
the search results and the explainer's buckets (pages/_trace_explain.py) all move it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._shell import (
    max_scale,
    min_font_px,
    presenter_tree_px,
    say,
    say_list,
    tree_height,
)
from pages._trace_blocks import show_blocks, show_downloads
from pages._trace_explain import go_to_step, show_explainer
from pages._trace_kv import show_kv_recording
from pages._trace_why import show_why
from radix.tree.snapshot import format_tree
from scenarios.trace import search
from viz.component import tree_view
from viz.escape import esc_md
from viz.fold import fold_tree
from viz.roles import step_highlight
from viz.scene import fit_tree_scene, tree_scene
from viz.trace import (
    failure_text,
    id_labels,
    invariants_text,
    op_summary,
    rejection_rows,
    step_caption,
    step_lines,
    summary_rows,
    synthetic_ids_note,
    text_head,
)
from viz.words import build_owners

MAX_DRAWN_NODES = 2_000  # boxes drawn after folding (1,000 draw in ~0.4 s); more: text only


def _follow(key: str) -> None:
    """The step box's or the slider's callback: move to its value.

    subtle: when keys arrive faster than the script runs (an arrow key held on the slider),
    Streamlit merges them into one rerun that calls both widgets' callbacks, and an earlier
    run may have been cut off before it drew the other widget. So a callback neither assumes
    its key is there nor removes the other's (that removal was the KeyError of #24).
    """
    value = st.session_state.get(key)
    slider = st.session_state.get("trace.slider")
    if key == "trace.box" and slider is not None and slider != st.session_state.get("trace.at"):
        # the slider moved in this same rerun: the box's value is the one the browser showed
        # before (a run cut off before it drew the box), not a number typed: the slider wins
        return
    if value is not None:
        go_to_step(int(value), moved=key)


def show_replay(r: Any, state: dict | None = None, sid: str = "-") -> None:
    """The replay's summary, explainer (with `state`, the session's held trace state), step
    navigator, tree, block view and downloads."""
    if r.trace.format == "kv_events":
        show_kv_recording(r)
        return
    log = r.log
    if r.trace.format == "ops":
        say("subheader", f"Replay summary: {r.name} (op log, {log.num_steps:,} tree steps)")
        say("info", op_summary(r))
    else:
        say("subheader", f"Replay summary: {r.name} ({r.trace.format}, "
                         f"{len(r.trace.requests):,} requests, {log.num_steps:,} tree steps)")
        st.dataframe(summary_rows(r.stats, r.block_size), hide_index=True)
        if r.rejections:
            say("warning", f"{len(r.rejections):,} request(s) rejected:")
            st.dataframe(rejection_rows(r.rejections), hide_index=True)
        if state is not None:
            # opening it runs the explainer (a job): nothing runs for a closed panel
            with st.expander("Why this hit rate? Every prompt token in one bucket, the "
                             "requests behind each, and what-ifs", key="trace.explain",
                             on_change="rerun"):
                if st.session_state.get("trace.explain"):
                    show_explainer(r, state, sid)
        show_why(r)  # two requests compared: where B parts from A, and why (issue 22)
    default = log.num_steps
    if r.failure is not None:
        say("error", failure_text(r.failure))
        default = r.failure.last_good_step
    elif r.first_bad_step is not None:
        say("error", f"First bad step: {r.first_bad_step:,}. {r.violation}")
        default = r.first_bad_step
    elif r.trace.format != "ops":
        st.success(invariants_text(r))
    st.session_state.setdefault("trace.at", default)
    _navigator(r)
    step = st.session_state["trace.at"]
    snap = log.snapshot_at(step)
    events = log.events_of(step - 1) if step else []
    if events:
        say("caption", step_caption(events, log.num_steps))
        with st.expander("what this step did, event by event"):
            if state is not None and "owners" not in state:
                state["owners"] = build_owners(log.steps)
            owners = state.get("owners") if state is not None else None
            say_list(step_lines(log, step - 1, owners))
    highlight = step_highlight(events, snap)
    left, right = st.columns([3, 2])
    with left:
        max_children, drawn = _tree(snap, highlight, id_labels(r.trace, 2))
    with right:
        text = format_tree(snap, mark_leaves=True, ids=id_labels(r.trace))
        head, note = text_head(text, 200)
        st.code(head, language=None)
        if note:
            st.caption(note)
        ids = synthetic_ids_note(snap)
        if ids:
            say("caption", ids)
    if r.blocks is not None:
        show_blocks(r, step, {} if state is None else state.setdefault("blocks_cache", {}))
    show_downloads(r, snap, highlight, max_children, drawn, text, state)


def _navigator(r: Any) -> None:
    """The step box, the slider and the request search, all on `trace.at`."""
    n = r.log.num_steps
    at = st.session_state["trace.at"]
    for key in ("trace.box", "trace.slider"):  # first run, or after a run that did not draw them
        st.session_state.setdefault(key, at)
    c = st.columns([1, 3, 2])
    c[0].number_input("tree after step", 0, n, key="trace.box",
                      on_change=_follow, args=("trace.box",))
    c[1].slider("step", 0, n, key="trace.slider", label_visibility="hidden",
                on_change=_follow, args=("trace.slider",))
    rid = c[2].text_input("find a request id", key="trace.find",
                          placeholder="admitted / finished / evicted")
    if rid:
        hits = search(r, rid.strip())
        if not hits:
            say("caption", f"No request {rid!r} in this trace.")
        for i, f in enumerate(hits[:12]):
            # numbered as the box counts (steps done): the tree after the found step
            st.button(esc_md(f"{f.what}: step {f.step + 1:,}"), key=f"trace.hit{i}",
                      on_click=go_to_step, args=(f.step + 1,))


def _tree(snap: Any, highlight: dict[int, str], ids: Any = None) -> tuple[int, int]:
    """Draws the tree at the step; returns (children drawn per node, boxes drawn)."""
    f = st.columns(2)
    max_children = int(f[0].number_input(
        "children drawn per node", 1, 500, 12, key="trace.max_children",
        help="The rest fold into one '+K more' node (counted in full). What the step touched, "
             "locked nodes and the largest subtrees are drawn first."))
    depth = int(f[1].number_input("depth cap (0: none)", 0, 1_000, 0, key="trace.max_depth"))
    plan = fold_tree(snap, max_children, depth or None, highlight)
    drawn = len(plan.drawn) + len(plan.folds)
    st.caption(f"{len(snap.nodes):,} nodes: {len(plan.drawn):,} drawn, "
               f"{len(snap.nodes) - len(plan.drawn):,} folded into {len(plan.folds):,} "
               "'+K more' box(es), counted in full."
               + (" Coloured: what the step touched." if highlight else ""))
    if drawn <= MAX_DRAWN_NODES:
        # LR: a wide fan-out stacks down the column instead of shrinking to a thin line.
        # Presenter mode: top-down (a path's edge labels side by side made even a 5-node tree
        # 1,178 px wide at 14 px), these settings first, then folded further until labels
        # keep 14 px, never folding what the step touched or a locked node (a step that
        # highlights a whole deep path: the view scrolls at 14 px, issue 41)
        box = presenter_tree_px(0.6, tree_height(420))  # the left of columns [3, 2]
        items = {"highlight": highlight, "rankdir": "TB" if box else "LR",
                 "max_children": max_children, "max_depth": depth or None, "ids": ids}
        scene = (fit_tree_scene(snap, *box, min_font_px(), **items) if box
                 else tree_scene(snap, **items))
        tree_view(scene, key="trace.tree", height=tree_height(420), duration_ms=250,
                  max_scale=max_scale(), min_font_px=min_font_px())
    else:
        st.info(f"{drawn:,} boxes: too many to draw; lower the children per node or the depth.")
    return max_children, drawn


