"""AppTest for the Classroom page: a lecturer and students as separate sessions of the page.

The rooms run the simulated engine (RADIXLENS_CLASSROOM_ENGINE=sim; no model). Each AppTest is
its own browser session: two lecturers open two rooms, students join by code (one mistypes it
first), ask, and see their own room's prompts only; the lecturer's buttons pause and clear.
"""

from __future__ import annotations

import pytest
from apphelp import page, plain, texts
from machine import seconds

from scenarios import classroom as cls
from scenarios.room import SYSTEM
from viz.live import live_scene


@pytest.fixture(autouse=True)
def sim_rooms(monkeypatch):
    monkeypatch.setattr(cls, "ENGINE", "sim")
    yield
    cls.ROOMS.close_all()


def _lecturer():
    at = page("classroom").run()
    at.button(key="classroom.start").click().run()
    assert not at.exception and not at.error
    return at, at.session_state["classroom.code"]


def _student(code: str, name: str):
    at = page("classroom").run()
    at.text_input(key="classroom.join_code").set_value(code)
    at.text_input(key="classroom.join_name").set_value(name)
    at.button(key="classroom.join").click().run()
    return at


def _ask(at, text: str) -> None:
    at.text_input(key="classroom.prompt").set_value(text)
    at.button(key="FormSubmitter:classroom.ask-ask").click().run()
    assert not at.exception and not at.error


def _settle(at) -> None:
    """Waits for the room's requests, then reruns (the refresh timer does not tick here)."""
    room = cls.ROOMS.get(at.session_state["classroom.code"])
    for a in room.rows():
        if a.req is not None:
            a.req.handle.result(timeout=seconds(30))
    at.run()


def _prompts(at) -> list[str]:
    table = at.dataframe[0].value
    return list(table["prompt"]) if len(table) else []


def test_lobby_then_a_wrong_code_is_one_line():
    at = page("classroom").run()
    assert not at.exception and at.title[0].value == "Classroom"
    assert {b.key for b in at.button} == {"classroom.start", "classroom.join"}
    at = _student("QQQQQ", "Ann")
    assert "no open room has the code QQQQQ" in plain(at.error[0].value)
    at = _student("ABCDE", "")
    assert "type your name first" in plain(at.error[0].value)
    at = _student("ABCDE", " LECTURER ")  # the lecturer's name: no student may take it
    assert "is the lecturer's name in the room" in plain(at.error[0].value)


def test_two_rooms_stay_apart_and_the_lecturer_controls():
    lect_a, code_a = _lecturer()
    lect_b, code_b = _lecturer()
    assert code_a != code_b
    assert {b.key for b in lect_a.button} >= {"classroom.pause", "classroom.step",
                                              "classroom.clear", "classroom.end"}
    ann = _student(code_a.lower(), "Ann *the* [star](http://x)")
    bob = _student(code_b, "Bob")
    assert not ann.exception and not ann.error and ann.query_params["room"] in (code_a, [code_a])
    assert "classroom.pause" not in {b.key for b in ann.button}  # students have no controls
    _ask(ann, "What is a radix tree?")
    _ask(bob, "What does vLLM hash?")
    _settle(ann), _settle(bob), _settle(lect_a)
    assert _prompts(ann) == ["What is a radix tree?"] == _prompts(lect_a)
    assert _prompts(bob) == ["What does vLLM hash?"]
    assert list(ann.dataframe[0].value["student"]) == ["* Ann *the* [star](http://x)"]
    assert list(lect_a.dataframe[0].value["student"]) == ["Ann *the* [star](http://x)"]
    assert "1 answered" in plain(lect_a.info[0].value)
    # presenter mode: the lecturer's tree is the room's snapshot folded for the projector
    lect_a.session_state["shell.presenter"] = True
    lect_a.run()
    (_, _, fit), view = lect_a.session_state["classroom.view"]
    assert not lect_a.exception and fit is not None and fit[2] == 14.0
    assert view["scene"] == live_scene(view["snapshot"], view["decode"], None, 12, fit)[0]
    # on the projector the table is a plain one (cells wrap): each prompt the student's own
    # question, the whole answer; the shared system prompt said once, above it (issue 41)
    table = lect_a.table[0].value
    room = cls.ROOMS.get(code_a)
    assert list(table["prompt"]) == ["What is a radix tree?"]
    assert list(table["answer"]) == [room.session.text(room.rows()[0].req)]
    said = [c for c in texts(lect_a.caption) if SYSTEM in c]
    assert len(said) == 1 and SYSTEM not in table.to_string()
    lect_a.session_state["shell.presenter"] = False
    lect_a.run()
    assert lect_a.session_state["classroom.view"][0][2] is None
    lect_a.button(key="classroom.pause").click().run()
    # the click's own run already shows the new state: the button reads "resume" (#24 item 3)
    assert lect_a.button(key="classroom.pause").label == "resume"
    assert not lect_a.button(key="classroom.step").disabled
    _ask(ann, "And a block?")
    lect_a.run()
    assert "paused; 1 waiting" in plain(lect_a.info[0].value)
    lect_a.button(key="classroom.step").click().run()
    _settle(lect_a)
    assert "paused; 0 waiting, 0 in the engine, 2 answered" in plain(lect_a.info[0].value)
    lect_a.button(key="classroom.clear").click().run()
    ann.run()
    assert "0 answered" in plain(ann.info[0].value) and len(_prompts(ann)) == 0
    lect_a.button(key="classroom.end").click().run()
    ann.run()
    assert any("has closed" in t or "no open room" in t for t in texts(ann.error))
