"""Tour: DESIGN.md's three-request walk (R1, R2, R3), one micro-event at a time, with numbers."""

from __future__ import annotations

import streamlit as st

from radix.runs.costs import LABEL
from viz.blocks_chain import queue_line, request_chain
from viz.blocks_grid import block_grid_figure, grid_caption
from viz.component import tree_view
from viz.dot import tree_to_dot
from viz.timeline import Timeline
from viz.tour import (
    CAPACITY_TOKENS,
    block_counters,
    block_index,
    counter_table,
    lookup_text,
    rid_at,
    run_tour,
    tour_numbers,
    tree_counters,
)

SPEEDS = {"slow": 1.5, "normal": 0.8, "fast": 0.4}  # seconds per micro-event while playing


@st.cache_resource
def _tour():
    run = run_tour()
    return run, Timeline(run.log)


run, tl = _tour()
st.session_state.setdefault("tour.cursor", (0, 0))
st.session_state.setdefault("tour.playing", False)
st.session_state.setdefault("tour.selected", None)
END = (tl.num_steps, 0)


def _move(where: str) -> None:
    s, k = st.session_state["tour.cursor"]
    if where == "start":
        s, k = 0, 0
    elif where == "back":
        s, k = tl.prev(s, k)
    elif where == "next":
        s, k = tl.next(s, k)
    elif where == "step":
        s, k = (min(s + 1, tl.num_steps), 0)
    st.session_state["tour.cursor"] = (s, k)


def _toggle_play() -> None:
    st.session_state["tour.playing"] = not st.session_state["tour.playing"]
    if st.session_state["tour.cursor"] == END:
        st.session_state["tour.cursor"] = (0, 0)


st.title("Tour: three requests share a prefix")
st.caption("R1 = S+F+96 tokens, R2 = S+F+80, R3 = S+2,112 (S: 512-token system prompt, "
           "F: 1,543-token few-shot block). Each request: match_prefix, inc_lock_ref, insert, "
           "dec_lock_ref, as SGLang's scheduler does.")
cols = st.columns([1, 1, 1, 1, 1.2, 2])
cols[0].button("start", on_click=_move, args=("start",), key="tour.b_start")
cols[1].button("back", on_click=_move, args=("back",), key="tour.b_back")
cols[2].button("next ▶", on_click=_move, args=("next",), key="tour.b_next")
cols[3].button("next step", on_click=_move, args=("step",), key="tour.b_step")
cols[4].button("pause" if st.session_state["tour.playing"] else "play",
               on_click=_toggle_play, key="tour.b_play")
speed = cols[5].select_slider("speed", list(SPEEDS), value="normal", key="tour.speed",
                              label_visibility="collapsed")
playing = st.session_state["tour.playing"]


@st.fragment(run_every=SPEEDS[speed] if playing else None)
def _view() -> None:
    if st.session_state["tour.playing"]:
        if st.session_state["tour.cursor"] == END:
            st.session_state["tour.playing"] = False
            st.rerun(scope="app")
        _move("next")
    step, k = st.session_state["tour.cursor"]
    frame = tl.frame(step, k)
    st.markdown(f"**Step {step} / {tl.num_steps}, event {k} / {tl.num_micro(step)}**")
    st.info(frame.narration or "…")
    n = tour_numbers(run, frame.snapshot, step, k)
    m = st.columns(5)
    m[0].metric("tree stores (tokens)", f"{n.stored:,}")
    m[1].metric("stored apart (tokens)", f"{n.apart:,}")
    m[2].metric("saved (tokens)", f"{n.saved:,}")
    m[3].metric("saved KV", f"{n.saved_mib:,.0f} MiB")
    m[4].metric("saved prefill", f"{n.saved_prefill_ms:,.1f} ms")
    st.caption(f"MiB and ms: {LABEL}. Both caches: capacity {CAPACITY_TOKENS:,} tokens.")
    left, right = st.columns([3, 2])  # the pictures first: on a projector they stay in view
    with left:
        _tree(frame)
    with right:
        _blocks(step, k)
    st.dataframe(counter_table(tree_counters(run, frame.snapshot, step, k),
                               block_counters(run, step, k)), hide_index=True)


def _tree(frame) -> None:
    selected = st.session_state["tour.selected"]
    highlight = dict(frame.highlight)
    if selected is not None and selected not in highlight:
        highlight[selected] = "selected"
    clicked = tree_view(tree_to_dot(frame.snapshot, highlight=highlight), key="tour.tree",
                        height=380)
    if clicked is not None:
        st.session_state["tour.selected"] = clicked
    node = frame.snapshot.by_id().get(st.session_state["tour.selected"])
    if node is not None:
        st.markdown(f"**Node #{node.id}**: {len(node.token_ids):,} tokens "
                    f"(first: {list(node.token_ids[:8])}), slots {list(node.slot_ids[:8])}…, "
                    f"lock_ref {node.lock_ref}, hit_count {node.hit_count}, "
                    f"created t={node.creation_time:g}, last access t={node.last_access_time:g}, "
                    f"priority {node.priority}")


def _blocks(step: int, k: int) -> None:
    """vLLM's block pool beside the tree, after the block call that stands beside this step."""
    snap = run.blocks[block_index(step, k, tl.num_steps)]
    choice = st.selectbox("hash chain of", ["the current request", *run.rids], key="tour.rid")
    rid = choice if choice in run.rids else rid_at(run, step)
    prompt = run.prompts[run.rids.index(rid)]
    chain = [link.block_id for link in request_chain(snap, prompt) if link.block_id]
    st.plotly_chart(block_grid_figure(snap, columns=24, chain_ids=chain,
                                      stop_text=f"vLLM block pool: {rid}'s chain outlined"),
                    key="tour.blocks")
    st.caption(grid_caption(snap))
    st.markdown(lookup_text(run, rid, step, k))
    st.caption(queue_line(snap))


_view()
