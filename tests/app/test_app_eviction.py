"""AppTest for the eviction lab page: the default shows the policies disagree; stepping through
evict(300); the block side; the design question; errors follow the settings; the T-LRU section
(both choices and the sentence why, its widgets) and the tree's flavor caption."""

from __future__ import annotations

import json

from apphelp import echarts, metrics, page, plain

KEY = "eviction.lru.2.LabState(num_live=384, rag_reads=2, rag_priority=1).300"


def test_default_the_policies_disagree():
    """Default: 16 finished conversations, RAG read twice. LRU pops RAG; the seven-policy
    table shows three different choices; vLLM's 19 blocks start with the 16 finished
    conversations' partial blocks, then 3 RAG blocks: 48 cached tokens dropped."""
    at = page("eviction").run()
    assert not at.exception and not at.error
    m = metrics(at)
    assert (m["freed so far"], m["evictable"]) == ("0 tok", "2,496 tok")
    assert (m["blocks taken"], m["cached tokens dropped"]) == ("19", "48")
    # 19 blocks = 304 tokens is a unit conversion, not a change: no arrow (#24 item 9)
    taken = next(x for x in at.metric if x.label == "blocks taken")
    assert taken.proto.delta == "= 304 tokens" and taken.proto.direction == 2  # NONE
    assert plain(at.info[0].value).startswith("evict(300) under lru: 17 evictable leaves")
    table = next(d.value for d in at.dataframe if "policy" in d.value).set_index("policy")
    assert table.loc["lru", "evicts (pop order)"] == "RAG context (2,112)"
    assert table.loc["lfu", "evicts (pop order)"] == "conv-000 … conv-012 (13 x 24)"
    assert table.loc["mru", "evicts (pop order)"] == "conv-015 … conv-003 (13 x 24)"
    # every branch is under 4,096 - 512 tokens: all leaves TEL-safe, T-LRU pops what LRU pops
    assert table.loc["tlru", "evicts (pop order)"] == "RAG context (2,112)"
    assert any("3 different choice(s)" in plain(c.value) for c in at.caption)


def test_stepping_pops_the_rag_leaf():
    """next, next: the pop frame (2,112 of 300 freed); end: the overshoot line."""
    at = page("eviction").run()
    at.button(key=f"{KEY}.b_next").click().run()
    at.button(key=f"{KEY}.b_next").click().run()
    assert at.session_state[f"{KEY}.i"] == 2
    assert plain(at.info[0].value).endswith("2,112 of 300 freed")
    assert metrics(at)["freed so far"] == "2,112 tok"
    at.button(key=f"{KEY}.b_end").click().run()
    line = plain(at.info[0].value)
    assert "overshoot 1,812" in line and "S stays" in line


def test_design_question_and_a_call_that_falls_short():
    """All 400 live, 100,000 asked: the title says so; vLLM wants 6,250 blocks with 132 free
    and says it would preempt a running request; the tree's last frame is 97,888 short, the
    other 10,112 tokens locked. vLLM's grid is one keyed chart, redrawn in place: the same
    element before and after the settings change (#24: a plotly grid was re-mounted blank)."""
    at = page("eviction").run()
    ((grid_id, before),) = echarts(at)
    at.selectbox(key="eviction.preset").set_value("DESIGN.md's question: all 400 live")
    at.number_input(key="eviction.to_free").set_value(100_000).run()
    key = "eviction.lru.2.LabState(num_live=400, rag_reads=1, rag_priority=0).100000"
    at.button(key=f"{key}.b_end").click().run()
    assert not at.exception
    assert at.title[0].value == "Eviction lab: 100,000 tokens must go"
    err = plain(at.error[0].value)
    assert "Only 132 blocks are free, 6,250 wanted" in err and "preempt a running" in err
    line = plain(at.info[0].value)
    assert "97,888 short" in line and "the other 10,112 cached tokens are locked" in line
    ((now_id, after),) = echarts(at)
    taken = [sum(c["value"][2] == 4 for c in o["series"][0]["data"]) for o in (before, after)]
    assert now_id == grid_id and taken == [19, 132]  # STATES[4] = "taken": 19, then all 132 free


def test_mru_pops_the_newest_finished_conversations():
    at = page("eviction").run()
    at.selectbox(key="eviction.policy").set_value("mru").run()
    assert not at.exception
    assert "First in policy order: conv-015" in plain(at.info[0].value)


def test_tlru_section_shows_both_choices_and_why():
    """Defaults (SGLang's help example, 4,096 and Q 512; derivation in
    tests/scenarios/test_scenarios_tlru.py): LRU takes chat-A's 7,488-token leaf, T-LRU the TEL-safe
    chat-B (700) and chat-C's turn 2 (2,500); the sentence names which tails are TEL-safe."""
    at = page("eviction").run()
    assert not at.exception and not at.error
    shown = [plain(m.value) for m in at.markdown]
    assert "LRU evicts: chat-A turn 1 (7,488)" in shown
    assert "T-LRU evicts: chat-B turn 1 (700), then chat-C turn 2 (2,500)" in shown
    why = plain(at.info[-1].value)
    assert why.startswith("TEL-safe (the TTFT budget is 4,096 tokens")
    assert "chat-C turn 2 (next prefill 3,012 <= 4,096)" in why
    assert "Not TEL-safe: chat-A turn 1 (next prefill 8,000 > 4,096)" in why
    assert any(plain(c.value).startswith("Tree flavor: unified") for c in at.caption)


def test_tlru_widgets_drive_the_section_and_the_lab():
    """Threshold 3,000: chat-C's turn 2 would leave 3,012 > 3,000 to prefill, so only chat-B is
    TEL-safe; T-LRU pops it (700), then falls back to LRU: chat-A (7,488). A threshold not
    above the estimate is refused as SGLang's server refuses it."""
    at = page("eviction").run()
    at.number_input(key="eviction.tlru.threshold").set_value(3_000).run()
    shown = [plain(m.value) for m in at.markdown]
    assert "T-LRU evicts: chat-B turn 1 (700), then chat-A turn 1 (7,488)" in shown
    at.number_input(key="eviction.tlru.threshold").set_value(512).run()
    assert not at.exception
    assert "must exceed next_prompt_estimate 512" in plain(at.error[0].value)


def test_host_tier_section_demotes_then_loads_back():
    """scenarios/hosttier.py's walk (device 8, host 17, write-through): request 2 (chat B)
    demotes chat A's 6 tokens to host; request 3 (chat A again) loads 5 back from host (the
    match of A[:-1] splits A 5 + 1), demotes B to make room and computes 1 token; the move
    slider starts on the request's last move, its node outlined."""
    at = page("eviction").run()
    at.radio(key="eviction.hosttier.step").set_value(1).run()
    shown = " ".join(plain(m.value) for m in at.markdown)
    assert "chat B: 0 tokens from the device, 0 loaded back from host, 6 computed" in shown
    assert "node #1 demoted: its 6 device slots freed, its host copy kept" in shown
    at.radio(key="eviction.hosttier.step").set_value(2).run()
    assert not at.exception
    shown = " ".join(plain(m.value) for m in at.markdown)
    assert "chat A again: 0 tokens from the device, 5 loaded back from host, 1 computed" in shown
    assert "loaded back from host: 5 tokens onto node(s) #3" in shown
    # its moves a Markdown list, an item a line (issue 41 item 8: one paragraph, literal "- ")
    (moves,) = [m.value for m in at.markdown if "loaded back from host: 5" in plain(m.value)]
    items = moves.split("\n")
    assert len(items) >= 3 and all(i.startswith("- ") and "\\- " not in i for i in items)
    assert metrics(at)["host used"] == "12 tok"
    # the move slider starts on the request's last move (of split, demote B, load back,
    # restore): A's last token (#1) restored on the device, outlined; B (#2) host only
    assert at.select_slider(key="eviction.hosttier.move.2").value == 3
    drawn = [c for c in at.get("bidi_component") if c.proto.id.endswith("eviction.hosttier.tree")]
    nodes = {n["id"]: n for n in json.loads(drawn[0].proto.json)["scene"]["nodes"]}
    assert (nodes["n1"]["label"], nodes["n1"]["stroke"], nodes["n1"]["move"]) == (
        "#1: 6\ndevice + host copy", "#d62728", "restore")
    assert (nodes["n2"]["label"], nodes["n2"]["fill"]) == ("#2: 7 8 9 10 11 12\nhost only",
                                                           "#ff7f0e")
