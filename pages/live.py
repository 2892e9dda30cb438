"""Live engine: real requests on the real default model through the radix tree, as they run.

Two modes: run the model here (this session's own engine), or watch a server: its base URL
opens the "Watch a server" page (pages/watch.py, `?base=`), which discovers its KV-event
publishers and connects; the model is not loaded for that.

RADIXLENS_LIVE_ENGINE=sim (read on every run) gives each session the simulated engine instead
(no model: the same scheduler, tree and block shadow, priced; one token per character), as
RADIXLENS_CLASSROOM_ENGINE=sim does for the Classroom; the browser tests' shared server runs so.
"""

from __future__ import annotations

import os
import time

import streamlit as st

from engine.model import DEFAULT_NAME, cache_root, load_model
from pages._live_view import show_session
from pages._live_why import show_live_why
from pages._player import export_panel, export_range
from pages._serve import live_sessions
from pages._shell import long_caption, presenter, say, session_id
from scenarios.chats import SCENARIOS, SYSTEM
from scenarios.classroom import SimLoaded
from scenarios.live import LiveSession, own_process_service, sim_service
from viz.live import measured_label


@st.cache_resource(show_spinner=False)
def _model():
    from engine.remote import prestart  # the engines' model processes fork from a server

    prestart()  # that imports torch and transformers while the weights load here
    return load_model()


def _load():
    """The model, once per process, with a status box saying what the wait is."""
    first = not (cache_root() / DEFAULT_NAME / "model.safetensors").is_file()
    started = time.monotonic()
    with st.status("Loading SmolLM2-135M-Instruct (once per server process)…") as box:
        box.write("converting the GGUF weights once (about 30 s)" if first else
                  "reading the converted weights (a few seconds)")
        loaded = _model()
        box.update(label=f"Model ready ({time.monotonic() - started:.1f} s)", state="complete",
                   expanded=False)
    return loaded


LOCAL, WATCH = "run the model here", "watch a server"
head = st.columns([3, 2], vertical_alignment="center")  # the mode beside the title: no row
head[0].title("Live engine")
st.session_state.setdefault("live.mode", LOCAL)
mode = head[1].segmented_control("mode", [LOCAL, WATCH], key="live.mode",
                            label_visibility="collapsed",
                            help="watch a server: a vLLM or SGLang server's KV events, or "
                                 "`python -m engine serve`'s, drawn live on the Watch page")
if mode == WATCH:
    say("caption", "The cache of a running server, from its KV-event streams: each worker's "
        "blocks, the prefix tree they form, and prompts sent to its OpenAI API landing there. "
        "To try it here: `python -m engine serve --dp 2`.")
    base = st.text_input("server base URL (OpenAI API)", key="live.watch_base",
                         placeholder="http://127.0.0.1:8000/v1")
    if st.button("watch this server", key="live.watch_go", type="primary"):
        st.switch_page("pages/watch.py",
                       query_params={"base": base.strip()} if base.strip() else None)
    st.stop()
long_caption("Real requests on a real model: each prompt is matched against the radix tree, only "
             "the unmatched suffix is prefilled (256 tokens a round), and the prompt is inserted "
             "after its prefill. Your session has its own engine, tree and KV pool; the weights "
             "are shared.")
if os.environ.get("RADIXLENS_LIVE_ENGINE") == "sim":
    say("caption", "Simulated engine (RADIXLENS_LIVE_ENGINE=sim): no model; the same scheduler, "
        "tree and block pool, priced; one token per character.")
    loaded, MEASURED, factory = SimLoaded(), "simulated, no model", sim_service(0.02)
else:
    try:
        loaded = _load()
    except (ValueError, OSError, RuntimeError) as exc:
        say("error", f"The model could not be loaded: {exc}")
        st.stop()
    MEASURED, factory = measured_label(loaded), own_process_service

# presenter mode: the pictures first (filled in below), the controls folded under them
pictures = st.container() if presenter() else None
controls = st.expander("requests and settings", expanded=not presenter())
c = controls.columns([1, 1, 1])
no_cache = c[0].toggle("no cache (the control)", key="live.no_cache",
                       help="SGLang's --disable-radix-cache: every match is empty.")
max_new = int(c[1].number_input("max new tokens", 1, 64, 6, key="live.max_new"))
reset = c[2].button("reset: stop the engine, empty tree", key="live.reset")

registry = live_sessions()
session: LiveSession | None = st.session_state.get("live.session")
if session is None or reset:
    if session is not None:
        session.close()  # stops its engine thread before the new one starts
    session = LiveSession(loaded, no_cache=no_cache, service_factory=factory)
elif session.closed or session.no_cache != no_cache:
    # a fresh engine (empty tree); earlier rows stay. Closed: the registry swept this session
    # while its browser was disconnected, and it came back.
    session = session.restart(no_cache)
st.session_state["live.session"] = session
registry.put(session_id(), session)

pick, own = controls.tabs(["scenario", "your prompt"])
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
except (ValueError, RuntimeError) as exc:
    say("error", exc)
session.poll()
polling = session.pending


with pictures if pictures is not None else st.container():
    show_session(session, polling, MEASURED)
show_live_why(session, system)  # issue 22: two requests or two typed prompts compared
with export_panel("export the tree's history for slides (animated HTML)", "live") as open_:
    if open_:
        kept = list(st.session_state.get("live.scenes", ()))
        export_range("live", "live", len(kept), len(kept) - 1, lambda i: kept[i][1:],
                     ident=(kept[-1][0] if kept else None,))
