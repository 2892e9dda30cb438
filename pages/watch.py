"""Watch a server: a real cluster's KV events (vLLM, SGLang or engine serve), drawn live."""

from __future__ import annotations

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from pages._downloads import Item, show_item
from pages._shell import max_scale, min_font_px, presenter_tree_px, say
from runtime.sessions import SessionRegistry
from scenarios.watch import WatchSession, discover, http_json
from viz.cluster import fit_prefix_tree_scene, grid_caption, prefix_tree_scene, status_rows
from viz.component import tree_view
from viz.watch_charts import chart_height, overlap_chart, rates_chart, worker_grid_chart

POLL_S = 1.0
SIDE_BY_SIDE = 3  # workers drawn in one row; more go on to the next
TREE_PX = 360  # a worker's tree view
EXAMPLE = "python -m engine serve --dp 2   # then: discover, connect"


@st.cache_resource
def _registry() -> SessionRegistry[WatchSession]:
    return SessionRegistry()


def _is_active(session_id: str) -> bool:
    return not runtime.exists() or runtime.get_instance().is_active_session(session_id)


def _discover() -> None:
    try:
        found = discover(st.session_state.get("watch.base", ""))
        st.session_state["watch.endpoints"] = "\n".join(found)
        st.session_state["watch.error"] = ""
    except ValueError as exc:
        st.session_state["watch.error"] = str(exc)


def _connect() -> None:
    _disconnect()
    specs = [e for e in st.session_state.get("watch.endpoints", "").splitlines() if e.strip()]
    base = st.session_state.get("watch.base", "").strip() or None
    model = st.session_state.get("watch.model", "").strip() or None
    try:
        if base and not model:  # the server's first model
            model = http_json(base.rstrip("/").removesuffix("/v1") + "/v1/models",
                              timeout=5)[0]["data"][0]["id"]
            st.session_state["watch.model"] = model
        st.session_state["watch.session"] = WatchSession(specs, base, model)
        st.session_state["watch.error"] = ""
    except (ValueError, KeyError, IndexError) as exc:
        st.session_state["watch.error"] = str(exc)


def _disconnect() -> None:
    old = st.session_state.pop("watch.session", None)
    if old is not None:
        old.close()


if st.query_params.get("base") and st.session_state.get("watch.linked") != st.query_params[
        "base"]:  # `?base=URL` (the Live page's watch mode, a bookmark): discover and connect
    st.session_state["watch.linked"] = st.session_state["watch.base"] = st.query_params["base"]
    _discover()
    if not st.session_state.get("watch.error"):
        _connect()
st.title("Watch a server")
st.caption("Subscribe to a serving cluster's KV-event streams (vLLM --kv-events-config, SGLang, "
           "or `python -m engine serve`) and see what each worker caches: its blocks, the "
           "prefix tree they form, how much of a prompt each one holds (what a KV-aware router "
           "scores), and blocks stored and removed per second. Replays fill gaps; a view that "
           "lost events says so.")
c = st.columns([2, 1])
c[0].text_input("server base URL (OpenAI API)", key="watch.base",
                placeholder="http://127.0.0.1:8000/v1")
c[1].text_input("model (empty: the server's first)", key="watch.model")
st.text_area("KV-event endpoints, one per line: PUB or PUB,REPLAY", key="watch.endpoints",
             placeholder="tcp://127.0.0.1:5557,tcp://127.0.0.1:5567", height=80)
b = st.columns(4)
b[0].button("discover (engine serve)", key="watch.discover", on_click=_discover)
b[1].button("connect", key="watch.connect", on_click=_connect, type="primary")
b[2].button("disconnect", key="watch.disconnect", on_click=_disconnect)
if st.session_state.get("watch.error"):
    say("error", st.session_state["watch.error"])

ctx = get_script_run_ctx()
registry = _registry()
session: WatchSession | None = st.session_state.get("watch.session")
registry.put(ctx.session_id if ctx is not None else "bare", session)
registry.sweep(_is_active)
if session is None:
    st.info(f"Not watching anything. To try it on this machine: `{EXAMPLE}`.")
    st.stop()
# the applied batches with seq and receive time, as they are now
show_item(Item("watch.recording", "watch.msgpack", session.recording_size(), True,
               lambda out, *_: out.write(session.recording()), (session.recording_size(),),
               label="recording (.msgpack)"), b[3])



@st.fragment
def _prompt_row() -> None:
    """The prompt, its buttons and the system prompt, a fragment of their own: a click reruns
    this row only, and the live fragment below shows the prompt on its next refresh. A click
    that reran the whole page dropped the live fragment's charts (all of them, or one worker's
    column) about 1 s in and re-created them unpainted, in 2 of 8 busy runs (#24 item 8; 0 of 8
    since). The likely cause, read in Streamlit 1.67's frontend, not proven: a finished fragment
    run clears its stale elements without checking, as a full run's end does, that a newer run
    has not re-sent them."""
    p = st.columns([3, 1, 1, 1])
    prompt = p[0].text_input("prompt", "Can I return a tent I used once?", key="watch.prompt")
    max_tokens = int(p[1].number_input("max tokens", 1, 256, 8, key="watch.max_tokens"))
    send = p[2].button("send", key="watch.send", disabled=session.base_url is None)
    score = p[3].button("overlap", key="watch.score", disabled=session.base_url is None)
    system = st.text_input("system prompt (optional): the prefix your clients share",
                           key="watch.system", placeholder="You are a helpful assistant.")
    try:
        if send:
            session.send(prompt, max_tokens, system)
        if score:
            st.session_state["watch.scored"] = (prompt, session.tokenize(prompt, system))
    except ValueError as exc:
        say("error", exc)


_prompt_row()


def _chart(option: dict, key: str) -> None:
    """An ECharts chart redrawn in place on every refresh (keyed: its element id stays, so
    the frontend calls setOption on the same chart; a changed plotly figure is a new element,
    blank until drawn: viz/watch_charts.py)."""
    st.echarts_chart(option, key=key, height=chart_height(option), renderer="svg")


@st.fragment(run_every=POLL_S)
def _live() -> None:
    if session.error:
        say("error", f"the watcher stopped: {session.error}")
    views = session.views()
    st.dataframe(status_rows(views), hide_index=True)
    if session.sent:
        st.dataframe([{"prompt": s.text[:60], "state": s.state, "replica": s.replica,
                       "prompt tokens": s.prompt_tokens, "cached tokens": s.cached_tokens,
                       "blocks landed after (ms)": None if s.landed_after is None
                       else round(s.landed_after * 1e3), "answer / error": s.error or s.answer}
                      for s in session.sent[::-1][:8]], hide_index=True)
    scored = st.session_state.get("watch.scored")
    if scored and views and views[0].block_size:
        text, tokens = scored
        _chart(overlap_chart([v.name for v in views], session.overlaps(tokens),
                             len(tokens) // views[0].block_size), "watch.overlap")
        say("caption", f"{text[:80]!r}: {len(tokens)} tokens (chat template included).")
    _chart(rates_chart(views), "watch.rates")
    # side by side (comparing workers is the point), SIDE_BY_SIDE to a row
    for i, view in enumerate(views):
        if i % SIDE_BY_SIDE == 0:
            row = st.columns(min(SIDE_BY_SIDE, len(views) - i))
            box = presenter_tree_px(1 / len(row), TREE_PX)  # presenter mode: fold to fit
        with row[i % SIDE_BY_SIDE]:
            say("subheader", view.name)
            say("caption", grid_caption(view))
            if view.status.last_error:
                say("warning", f"last malformed frame: {view.status.last_error}")
            _chart(worker_grid_chart(view), f"watch.grid.{i}")
            if view.runs:
                scene = (fit_prefix_tree_scene(view, session.decode, *box, min_font_px()) if box
                         else prefix_tree_scene(view, session.decode))
                tree_view(scene, key=f"watch.tree.{i}", height=TREE_PX, duration_ms=300,
                          max_scale=max_scale(), min_font_px=min_font_px())


_live()
