"""Classroom: a lecturer starts a room, students join by its code, one engine and view for all."""

from __future__ import annotations

import secrets

import streamlit as st

from engine.model import load_model
from pages._room_view import show_room
from pages._shell import long_caption, presenter, say
from scenarios import classroom as cls
from scenarios.room import LECTURER, RoomError, reserved_name
from viz.escape import esc_html

CODE_CSS = ("<div style='font-size:{size};font-weight:700;white-space:nowrap;"
            "line-height:1.1'>Room <span style='letter-spacing:0.12em'>{code}</span></div>")


# subtle: the same source as the Live page's `_model`, so st.cache_resource gives both pages the
# one copy of the weights (its key is the module, the name and the source)
@st.cache_resource(show_spinner=False)
def _model():
    from engine.remote import prestart  # the engines' model processes fork from a server

    prestart()  # that imports torch and transformers while the weights load here
    return load_model()


ENGINES = {"model": "SmolLM2-135M (real, on this server's CPU)",
           "sim": "simulated (no model: the same scheduler and caches, priced)"}


def _start(engine: str) -> None:
    if engine == "sim":
        make = cls.sim_sessions(step_s=0.02)
    else:
        with st.status("Loading SmolLM2-135M-Instruct (once per server process)…") as box:
            make = cls.model_sessions(_model())
            box.update(label="Model ready", state="complete", expanded=False)
    room = cls.ROOMS.open(make)
    st.session_state.update({"classroom.code": room.code, "classroom.token": room.token,
                             "classroom.name": LECTURER})
    st.query_params["room"] = room.code


def _lobby() -> None:
    long_caption("One engine for the whole class: everyone's prompts go through the same radix "
                 "tree and block pool, so the second question under a shared system prompt "
                 "finds the first one's tokens cached. Students join with the room's code.")
    if "classroom.join_code" not in st.session_state:
        st.session_state["classroom.join_code"] = st.query_params.get("room", "")
    left, right = st.columns(2)
    with left:
        st.subheader("Lecturer")
        engine = st.radio("engine", list(ENGINES), format_func=ENGINES.get,
                          index=list(ENGINES).index(cls.ENGINE if cls.ENGINE in ENGINES
                                                    else "model"), key="classroom.engine")
        start = st.button("start a room", key="classroom.start")
    with right:
        st.subheader("Student")
        code = st.text_input("room code (on the projector)", key="classroom.join_code")
        name = st.text_input("your name", key="classroom.join_name", max_chars=32)
        join = st.button("join", key="classroom.join")
    try:
        if start:
            _start(engine)
            st.rerun()
        if join:
            if not name.strip():
                raise RoomError("type your name first (the class sees it next to your prompts)")
            if reserved_name(name):
                raise RoomError(f"{name.strip()!r} is the lecturer's name in the room; pick "
                                "your own")
            room = cls.ROOMS.get(code)
            st.session_state.update({"classroom.code": room.code, "classroom.name": name})
            st.query_params["room"] = room.code
            st.rerun()
    except (RoomError, ValueError, OSError, RuntimeError) as exc:
        say("error", exc)


def _control(room, action: str) -> None:
    """A control button's callback: it runs before the page does, so the buttons drawn next
    already show the room's new state (pause -> the button reads "resume")."""
    try:
        room.control(st.session_state["classroom.token"], action)
    except RoomError as exc:
        st.session_state["classroom.control_error"] = str(exc)


def _controls(room) -> None:
    c = st.columns(5)
    token = st.session_state["classroom.token"]
    toggle = "resume" if room.paused else "pause"
    for action, col in ((toggle, c[0]), ("step", c[1]), ("clear", c[2])):
        # one key for pause/resume: the button keeps its place as its label changes
        col.button(action, key="classroom.pause" if action == toggle else f"classroom.{action}",
                   disabled=action == "step" and not room.paused, on_click=_control,
                   args=(room, action))
    error = st.session_state.pop("classroom.control_error", None)
    if error:
        say("error", error)
    try:
        if c[3].button("end", key="classroom.end", help="close the room: its engine stops"):
            cls.ROOMS.close(room.code, token)
            _leave()
    except RoomError as exc:
        say("error", exc)


def _ask(room) -> None:
    with st.form("classroom.ask", clear_on_submit=True, border=False):
        c = st.columns([5, 1])
        text = c[0].text_input("your question", key="classroom.prompt", max_chars=1000,
                               placeholder="Ask the model something…")
        sent = c[1].form_submit_button("ask")
    if sent:
        try:
            room.ask(_me(), st.session_state.get("classroom.name", "?"), text,
                     token=st.session_state.get("classroom.token", ""))
        except RoomError as exc:
            say("error", exc)


def _me() -> str:
    """This browser session's id in rooms (random: shown to no one, kept for the session)."""
    return st.session_state.setdefault("classroom.me", secrets.token_hex(8))


def _leave() -> None:
    for key in ("classroom.code", "classroom.token", "classroom.view"):
        st.session_state.pop(key, None)
    st.query_params.pop("room", None)
    st.rerun()


st.title("Classroom")
cls.ROOMS.sweep()
if "classroom.code" not in st.session_state:
    _lobby()
    st.stop()
try:
    room = cls.ROOMS.get(st.session_state["classroom.code"])
except RoomError as exc:
    say("error", exc)
    if st.button("back to the lobby", key="classroom.back"):
        _leave()
    st.stop()
lecturer = st.session_state.get("classroom.token") == room.token
top = st.columns([1, 1])
top[0].html(CODE_CSS.format(size="2.6rem" if presenter() else "2.2rem", code=esc_html(room.code)))
with top[1]:
    if lecturer:
        _controls(room)
    else:
        say("caption", f"You are {st.session_state.get('classroom.name', '?')} in room "
                       f"{room.code}. Your prompts carry a star.")
        if st.button("leave", key="classroom.leave"):
            _leave()
if not (lecturer and presenter()):  # on the projector, the pictures come first
    _ask(room)
show_room(room, _me())
