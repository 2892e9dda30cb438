"""Live engine: real requests on the real default model through the radix tree, as they run."""

from __future__ import annotations

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.model import load_model
from radix.runs.costs import LABEL
from viz.component import tree_view
from viz.live import LiveSession, SessionRegistry, measured_label
from viz.live_scenarios import SCENARIOS, SYSTEM
from viz.live_table import request_rows, totals
from viz.live_tree import format_lines, live_dot

POLL_S = 0.7  # seconds between refreshes while requests run
MAX_CHILDREN = 12  # children drawn per node; the rest fold into one "+K more" box
MAX_DRAWN_NODES = 2_000


@st.cache_resource(show_spinner="Loading SmolLM2-135M-Instruct (once per process)…")
def _model():
    return load_model()


@st.cache_resource
def _registry() -> SessionRegistry:
    return SessionRegistry()


def _is_active(session_id: str) -> bool:
    return not runtime.exists() or runtime.get_instance().is_active_session(session_id)


st.title("Live engine")
st.caption("Real requests on a real model: each prompt is matched against the radix tree, only "
           "the unmatched suffix is prefilled, and the prompt is inserted after its prefill. "
           "Your session has its own engine, tree and KV pool; the weights are shared.")
try:
    loaded = _model()
except (ValueError, OSError, RuntimeError) as exc:
    st.error(f"The model could not be loaded: {exc}")
    st.stop()
MEASURED = measured_label(loaded)

c = st.columns([1, 1, 1])
no_cache = c[0].toggle("no cache (the control)", key="live.no_cache",
                       help="SGLang's --disable-radix-cache: every match is empty.")
max_new = int(c[1].number_input("max new tokens", 1, 64, 6, key="live.max_new"))
reset = c[2].button("reset: empty tree, clear table", key="live.reset")

registry, ctx = _registry(), get_script_run_ctx()
session_id = ctx.session_id if ctx is not None else "bare"
session: LiveSession | None = st.session_state.get("live.session")
if session is None or reset:
    if session is not None:
        session.close()
    session = LiveSession(loaded, no_cache=no_cache)
elif session.closed or session.no_cache != no_cache:
    # a fresh engine (empty tree); earlier rows stay. Closed: the registry swept this session
    # while its browser was disconnected, and it came back.
    session = session.restart(no_cache)
st.session_state["live.session"] = session
registry.put(session_id, session)
registry.sweep(_is_active)

pick, own = st.tabs(["scenario", "your prompt"])
with pick:
    name = st.selectbox("scenario", list(SCENARIOS), key="live.scenario")
    scenario = SCENARIOS[name]
    st.caption(scenario.about)
    all_at_once = st.checkbox("all at once: one prefill batch, so no request finds another's "
                              "prefix in the tree yet (a cold burst)", key="live.all_at_once")
    run_scenario = st.button(f"run {len(scenario.prompts)} requests", key="live.run_scenario")
with own:
    system = st.text_area("system prompt", SYSTEM, height=120, key="live.system")
    message = st.text_area("message", "Can I return a tent I used once?", key="live.message")
    run_own = st.button("run", key="live.run")

try:
    if run_scenario:
        session.submit_all(scenario.prompts, max_new, one_at_a_time=not all_at_once)
    if run_own:
        msgs = ([{"role": "system", "content": system}] if system.strip() else [])
        session.submit("you", msgs + [{"role": "user", "content": message}], max_new)
except ValueError as exc:
    st.error(str(exc))
session.poll()
polling = session.pending


@st.fragment(run_every=POLL_S if polling else None)
def _live() -> None:
    session.poll()
    if polling and not session.pending:
        st.rerun(scope="app")  # all done: redraw once more without the timer
    t = totals(session.requests)
    m = st.columns(5)
    m[0].metric("requests done", f"{t.finished:,}")
    m[1].metric("matched tokens", f"{t.matched:,}")
    m[2].metric("prefilled tokens", f"{t.prefilled:,}")
    m[3].metric("hit rate", f"{t.hit_rate:.0%}")
    m[4].metric("saved prefill (derived)", f"{t.saved_prefill_ms:,.1f} ms")
    st.dataframe(request_rows(session.requests, admitted=session.tree.admitted()),
                 hide_index=True)
    st.caption(f"TTFT and decode tok/s: {MEASURED}. Saved prefill and KV: {LABEL}, "
               "pricing each request's matched tokens.")
    lines = format_lines(session.tree.lines(8))
    st.info(lines[-1] if lines else "No events yet: run a scenario or a prompt.")
    if len(lines) > 1:
        st.text("\n".join(lines[-8:-1][::-1]))
    left, right = st.columns([3, 2])
    with left:
        _tree()
    with right:
        for req in session.requests[::-1][:4]:
            state = "done" if req.done else "running"
            st.markdown(f"**{req.rid}** ({state}, {len(req.output_ids)} tokens)")
            st.text(session.text(req) or "…")


def _tree() -> None:
    snap = session.tree.snapshot()
    dot, drawn, folded = live_dot(snap, session.decode, st.session_state.get("live.selected"),
                                  MAX_CHILDREN)
    st.caption(f"Tree: {len(snap.nodes) - 1} nodes, {snap.evictable_size + snap.protected_size:,}"
               f" tokens cached ({snap.protected_size:,} locked by running requests)."
               + (f" {folded:,} nodes folded into '+K more' boxes." if folded else ""))
    if len(snap.nodes) == 1:
        return  # only the root: nothing to draw yet
    if drawn > MAX_DRAWN_NODES:
        st.info(f"{drawn:,} nodes: too many to draw; reset to start over.")
        return
    clicked = tree_view(dot, key="live.tree", height=380, duration_ms=300)
    if clicked is not None:
        st.session_state["live.selected"] = clicked
    node = snap.by_id().get(st.session_state.get("live.selected"))
    if node is not None and node.parent is not None:
        owner = session.tree.owners().get(node.id, "?")
        st.markdown(f"**Node #{node.id}** (inserted by {owner}): {len(node.token_ids):,} tokens, "
                    f"lock_ref {node.lock_ref}, hit_count {node.hit_count}, "
                    f"slots {list(node.slot_ids[:6])}…")
        st.text(session.decode(list(node.token_ids))[:600])


_live()
