"""AppTest for the app's frame, the Tour and the Trace debugger: each renders without exception
and shows the right numbers, words or one-line errors."""

from __future__ import annotations

import json
import re

from apphelp import ROOT, echarts, finish_jobs, metrics, page, plain, texts
from machine import seconds
from streamlit.testing.v1 import AppTest

from runtime.budget import BUDGET

MOONCAKE = ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl"


def test_app_navigation_runs_with_the_presenter_toggle():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=seconds(30)).run()
    assert not at.exception
    assert "shell.presenter" in at.session_state and not at.session_state["shell.presenter"]


def _tour_at(step: int, k: int) -> AppTest:
    """The Tour opened by a deep link (?step=&k=), as a bookmarked URL would."""
    at = page("tour")
    at.query_params["step"], at.query_params["k"] = str(step), str(k)
    return at.run()


def test_tour_deep_link_past_a_steps_events_opens_that_step_and_says_so():
    """?step=7&k=99: step 7 (R2's insert) has 4 events, so its last, with a warning naming what
    the link asked for (issue 41: a k past the step's events opened step 0 without a word)."""
    at = _tour_at(7, 99)
    assert not at.exception
    assert "showing step 7, event 4" in plain(at.warning[0].value)
    assert plain(at.info[0].value).startswith("hit_count +1 on 2 of 2 node(s)")
    at = _tour_at(7, 2)
    assert not at.warning and plain(at.info[0].value) == "evictable leaves: +#3"


def test_tour_starts_empty_and_reaches_the_split():
    """Step 0 shows an empty tree. At step 3, event 1 (R1's insert) the tree stores R1's 2,151
    tokens; 'next' at step 5 plays R2's split (R1's leaf was made at t=3: the new prefix keeps
    that in the unified flavor) and the URL follows; a caption names the flavor."""
    at = page("tour").run()
    assert not at.exception
    assert metrics(at)["tree stores"] == "0 tok"
    at = _tour_at(3, 1)
    assert metrics(at)["tree stores"] == "2,151 tok"
    assert "grows a new leaf #1 of 2,151 tokens" in plain(at.info[0].value)
    at = _tour_at(5, 0)
    at.button(key="tour.three-requests.b_next").click().run()
    assert plain(at.info[0].value).startswith("R2 leaves R1 at token 2,055")
    # the unified flavor (the default) keeps R1's creation time (t=3) on the new prefix
    assert "the new prefix #2 keeps #1's creation time t=3" in plain(at.info[0].value)
    assert any(plain(c.value).startswith("Tree flavor: unified") for c in at.caption)
    assert (at.query_params["step"], at.query_params["k"]) == ("5", "1")


def test_tour_end_numbers_and_back():
    """The end of the walk: 4,343 stored, 6,910 apart, 2,567 saved = 321 MiB, 116.5 ms."""
    at = page("tour").run()
    at.button(key="tour.three-requests.b_end").click().run()
    assert not at.exception
    assert metrics(at) == {"tree stores": "4,343 tok", "stored apart": "6,910 tok",
                           "saved": "2,567 tok", "saved KV": "321 MiB",
                           "saved prefill": "116.5 ms"}
    at.button(key="tour.three-requests.b_back").click().run()
    assert (at.query_params["step"], at.query_params["k"]) == ("12", "1")


def _tree_args(at: AppTest) -> dict:
    """The tree component's arguments on the page (its scene left out)."""
    args = json.loads(at.get("bidi_component")[0].proto.json)
    return {k: v for k, v in args.items() if k != "scene"}


def test_tour_speed_sets_the_animation_and_the_scrubber_jumps():
    """The speed sets the tree's transition length (the animation, not only the autoplay
    interval): slow 1,000 ms, normal 550, fast 250 (_player.SPEEDS). The scrubber under the
    frame jumps from frame 0 straight to the walk's first split, (step 5, event 1): R2's; its
    frame index is counted from the walk. The end button lands on the last step."""
    from pages._player import SPEEDS
    from scenarios.tour import first_step_of, run_tour
    from viz.timeline import Timeline

    at = page("tour").run()
    assert _tree_args(at)["duration_ms"] == SPEEDS["normal"][1]
    seen = {}
    for speed in ("slow", "fast"):
        at.select_slider(key="tour.three-requests.speed").set_value(speed).run()
        seen[speed] = _tree_args(at)["duration_ms"]
    assert seen == {"slow": SPEEDS["slow"][1], "fast": SPEEDS["fast"][1]}
    assert SPEEDS["slow"][1] > SPEEDS["normal"][1] > SPEEDS["fast"][1]
    run = run_tour()
    tl = Timeline(run.log)
    cursors = [(s, k) for s in range(tl.num_steps + 1) for k in range(tl.num_micro(s) + 1)]
    split = cursors.index(first_step_of(run, "NodeSplit"))
    at.slider(key="tour.three-requests.scrub.0").set_value(split).run()
    assert not at.exception
    assert plain(at.info[0].value).startswith("R2 leaves R1 at token 2,055")
    # the unified flavor (the default) keeps R1's creation time (t=3) on the new prefix
    assert "the new prefix #2 keeps #1's creation time t=3" in plain(at.info[0].value)
    assert any(plain(c.value).startswith("Tree flavor: unified") for c in at.caption)
    assert (at.query_params["step"], at.query_params["k"]) == ("5", "1")
    at.button(key="tour.three-requests.b_end").click().run()
    assert at.query_params["step"] == str(tl.num_steps)


def test_tour_block_view_beside_the_tree_at_the_end():
    """The end: hit rates 2,567 / 6,910 = 37.1% (tree), 2,560 / 6,910 = 37.0% (blocks); R3's
    lookup stopped at block 32 (512 tokens); its chain is outlined. The grid is one keyed
    ECharts chart, the same element at the start and the end (changed in place, #24)."""
    at = page("tour").run()
    ((first, _),) = echarts(at)
    at.button(key="tour.three-requests.b_end").click().run()
    table = at.dataframe[0].value
    assert list(table["radix tree"][:2]) == ["2,567 of 6,910", "37.1%"]
    assert list(table["block cache (16-token blocks)"][:2]) == ["2,560 of 6,910", "37.0%"]
    assert any(c.startswith("R3: lookup hit 32 blocks (512 tokens)") for c in texts(at.caption))
    ((now, grid),) = echarts(at)
    chain = [s for s in grid["series"] if s.get("name") == "hash chain"]
    assert len(chain[0]["data"]) == 164  # R3's 2,624 // 16 full blocks, all cached by now
    assert now == first


def test_tour_multi_turn_deep_link_opens_the_lock_walk():
    """?walk=multi-turn&step=22&k=3: u000-t5's lock walk, third hop, two more to the root."""
    at = page("tour")
    at.query_params["walk"], at.query_params["step"], at.query_params["k"] = "multi-turn", "22", "3"
    at.run()
    assert not at.exception
    line = plain(at.info[0].value)
    assert line.startswith("u000-t5 locks #") and "2 more hop(s) to the root" in line


def test_trace_page_without_upload():
    at = page("trace").run()
    assert not at.exception
    assert "Upload a trace" in at.info[0].value
    memory = next(c for c in texts(at.caption) if c.startswith("Memory (estimated): this "
                                                              "session holds"))
    assert "MiB resident, " in memory and "more than at its first page run" in memory


def test_trace_bad_upload_names_line_and_field():
    """Line 2's "tokens" is a string: the error box says so; no exception reaches the page."""
    at = page("trace").run()
    bad = (b'{"rid": "a", "arrival": 0, "tokens": [1, 2], "output_len": 1}\n'
           b'{"rid": "b", "arrival": 1, "tokens": "oops", "output_len": 1}\n')
    at.file_uploader(key="trace.upload").set_value(("bad.jsonl", bad, "application/json")).run()
    finish_jobs(at)
    assert not at.exception
    err = plain(at.error[0].value)
    assert "line 2" in err and '"tokens"' in err


def test_trace_upload_within_the_server_limits(monkeypatch):
    """The page replays within RADIXLENS_TRACE_LIMITS (runtime/budget.py's server_limits): under
    max_requests=1 a two-request upload is refused on line 2, naming the limit."""
    monkeypatch.setenv("RADIXLENS_TRACE_LIMITS", "max_requests=1")
    at = page("trace").run()
    two = (b'{"rid": "a", "arrival": 0, "tokens": [1, 2], "output_len": 1}\n'
           b'{"rid": "b", "arrival": 1, "tokens": [1, 3], "output_len": 1}\n')
    _upload(at, "two.jsonl", two)
    assert not at.exception
    err = plain(at.error[0].value)
    assert "line 2" in err and "(max_requests)" in err


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="trace.upload").set_value((name, data, "text/plain")).run()
    return finish_jobs(at)


def test_trace_upload_replays_scrubs_and_searches():
    """Two requests sharing [1, 2]: 7 tree steps; at the end the tree holds 3 + 1 tokens;
    step 0 is the empty tree; searching 'b' offers its steps, numbered as the step box counts
    (steps done: b's lookup is the cache's step #4, the 5th), and a hit moves the box, the
    slider and the caption there."""
    at = page("trace").run()
    good = (b'{"rid": "a", "arrival": 0, "tokens": [1, 2, 3], "output_len": 1}\n'
            b'{"rid": "b", "arrival": 1, "tokens": [1, 2, 4], "output_len": 1}\n')
    _upload(at, "two.jsonl", good)
    assert not at.exception and not at.error
    assert BUDGET.usage(at.session_state["trace.sid"]).session > 0  # the page holds it there
    assert "7 tree steps" in plain(at.subheader[0].value)
    assert "Invariants held" in at.success[0].value
    assert "#tokens: 4" in at.code[0].value
    summary = at.dataframe[0].value
    assert list(summary["radix tree (SGLang)"][:3]) == ["2", "0", "6 tokens"]
    at.number_input(key="trace.box").set_value(0).run()
    assert "#tokens: 0" in at.code[0].value
    at.text_input(key="trace.find").set_value("b").run()
    labels = [plain(b.label) for b in at.button if b.key and b.key.startswith("trace.hit")]
    assert labels == ["looked up: step 5", "admitted: step 6", "finished: step 7"]
    at.button(key="trace.hit2").click().run()
    assert at.session_state["trace.at"] == 7
    assert at.number_input(key="trace.box").value == 7 and at.slider(key="trace.slider").value == 7
    # numbered one way, as the box counts: the tree after step 7 of 7, b's finish (issue 41:
    # it added "the cache's step #6")
    assert "step 7 of 7: b cache_finished_req (15 events)" in texts(at.caption)
    # what the step did: one Markdown list, an event a line (issue 41 item 8: literal "- ")
    (did,) = [m.value for m in at.markdown if m.value.startswith("- step 7")]
    assert len(did.split("\n")) >= 3 and all(i.startswith("- ") for i in did.split("\n"))


def test_trace_failing_op_log_shows_its_last_good_tree():
    """A double unlock: the error names line 4 and the rule; the tree shown is the one after
    the last good step (4: the cache's reset, insert, lock, unlock), pretty_print included."""
    at = page("trace").run()
    ops = "".join(json.dumps(o) + "\n" for o in (
        {"op": "insert", "tokens": [1, 2, 3]}, {"op": "lock", "node": 1},
        {"op": "unlock", "node": 1}, {"op": "unlock", "node": 1}))
    _upload(at, "ops.jsonl", ops.encode())
    assert not at.exception
    err = plain(at.error[0].value)
    assert "line 4" in err and "never goes below 0" in err and "last good step (4)" in err
    assert at.session_state["trace.at"] == 4 and "#tokens: 3" in at.code[0].value
    assert "4 ops (2 unlock, 1 insert, 1 lock)" in plain(at.info[0].value)


def test_trace_block_view_at_the_chosen_step():
    """a = tokens 1..48, b = 1..35 + 14 own (49). The tree matches 35 of b's tokens; the block
    lookup hits blocks 0, 1 (32 tokens) and misses block 2 (tokens 32..47: 3 shared + 13
    own): 3 shared tokens re-prefilled. At step 4 (a done): b not yet."""
    at = page("trace").run()
    a = list(range(1, 49))
    b = list(range(1, 36)) + list(range(200, 214))
    data = (json.dumps({"rid": "a", "arrival": 0, "tokens": a, "output_len": 1}) + "\n"
            + json.dumps({"rid": "b", "arrival": 1, "tokens": b, "output_len": 1}) + "\n")
    _upload(at, "ab.jsonl", data.encode())
    assert not at.exception and not at.error
    assert plain(at.subheader[1].value).startswith("Block cache after 2 of 2 requests")
    text = [t for t in texts(at.markdown) if t.startswith("b: ")][0]
    assert "hit 2 blocks (32 tokens) of 49; stopped at block 2 (tokens 32..47): miss" in text
    assert "The tree matched 35: 3 shared tokens re-prefilled." in text
    ((first, grid),) = echarts(at)  # vLLM's grid, keyed: redrawn in place (#24)
    at.number_input(key="trace.box").set_value(4).run()
    assert plain(at.subheader[1].value).startswith("Block cache after 1 of 2 requests")
    ((now, back),) = echarts(at)
    assert now == first and "b's chain outlined" in grid["title"]["text"]
    assert "a's chain outlined" in back["title"]["text"]
    assert at.selectbox(key="trace.block_rid").options == ["a"]


def test_trace_mooncake_tree_folds_and_numbers_carry_units():
    """The Mooncake excerpt ends with 158 nodes: SGLang 0.5.23's finish splits every finished
    request's leaf at its prompt boundary (a prompt node and an output node; 83 nodes before
    that change). 12 children per node: 27 drawn, the other 158 - 27 = 131 fold into one box;
    3 per node: 7 drawn, 151 folded. The summary counts evictions in tokens for both caches."""
    at = page("trace").run()
    _upload(at, "m.jsonl", MOONCAKE.read_bytes())
    assert not at.exception and not at.error
    assert "158 nodes: 27 drawn, 131 folded into 1 '+K more' box(es), counted in full. " \
        "Coloured: what the step touched." in texts(at.caption)
    at.number_input(key="trace.max_children").set_value(3).run()
    assert any(c.startswith("158 nodes: 7 drawn, 151 folded") for c in texts(at.caption))
    summary = at.dataframe[0].value.set_index("")
    assert summary.loc["evicted"].str.contains("tokens").all()
    assert summary.loc["hit rate, admitted prompts"].str.endswith("%").all()
    assert (summary.loc["hit rate, all prompts"] == summary.loc["hit rate, admitted prompts"]).all()
    # hash ids as the trace has them (#<hash id>), not token ids (hash id x 512)
    shown = re.findall(r"^ *\d+ \[(.*)\] r=", at.code[0].value, re.M)
    assert len(shown) > 10 and all(s == "" or s[0] == "#" or s.startswith("reply")
                                   for s in shown), shown


def test_trace_big_pretty_print_is_cut_with_a_download():
    """250 requests with distinct first tokens: the root, 250 leaves and the "#tokens" line =
    252 lines of pretty_print; the page shows 200 and says so; the whole text is a download."""
    at = page("trace").run()
    data = "".join(json.dumps({"rid": f"r{i}", "arrival": i, "tokens": [1000 + i, 1, 2],
                               "output_len": 1}) + "\n" for i in range(250))
    _upload(at, "w.jsonl", data.encode())
    assert not at.exception and not at.error
    assert len(at.code[0].value.splitlines()) == 200
    assert "first 200 of 252 lines; download the whole text below" in texts(at.caption)
    assert any('download="w-pretty_print.txt"' in h.proto.body for h in at.get("html"))


def test_trace_kv_events_upload_says_what_it_holds():
    at = page("trace").run()
    data = (ROOT / "examples" / "traces" / "kv_events.jsonl").read_bytes()
    _upload(at, "kv.jsonl", data)
    assert not at.exception and not at.error
    assert "KV-events recording" in plain(at.subheader[0].value)
    assert "271 blocks" in at.info[0].value
    (row,) = at.dataframe[0].value.to_dict("records")  # folded as radix watch --read folds it
    assert row["blocks cached"] == 271 - 22 and not at.success


def test_trace_same_name_other_content_is_replayed_again():
    """Uploads are cached by content: a second file with the same name and size but other
    tokens shows its own tree."""
    at = page("trace").run()
    one = b'{"rid": "a", "arrival": 0, "tokens": [1, 2, 3], "output_len": 1}\n'
    two = b'{"rid": "a", "arrival": 0, "tokens": [7, 8, 9], "output_len": 1}\n'
    _upload(at, "same.jsonl", one)
    assert "[1, 2, 3]" in at.code[0].value
    _upload(at, "same.jsonl", two)
    assert "[7, 8, 9]" in at.code[0].value and "[1, 2, 3]" not in at.code[0].value


def test_trace_block_view_comes_with_the_summary():
    """The block keyframes are built in the summary's one pass (scenarios/blockframes.py), so
    the pool after the last request is drawn with the summary, no button to press: here 2,001
    requests, one past where the block view used to wait for a button (2,000 to replay block
    by block)."""
    at = page("trace").run()
    data = "".join(json.dumps({"rid": f"r{i}", "arrival": i, "tokens": [i % 7, 1, 2],
                               "output_len": 1}) + "\n" for i in range(2_001))
    _upload(at, "long.jsonl", data.encode())
    assert not at.exception and not at.error
    assert [b.key for b in at.button if not b.key.startswith("downloads.")] == []  # no "show
    # vLLM's block pool" button (key trace.blocks_go before); the downloads' buttons stay
    assert plain(at.subheader[1].value).startswith("Block cache after 2,001 of 2,001 requests")


def _tier_nodes(at: AppTest, key: str) -> dict[str, dict]:
    """The tier tree's scene nodes by id, from the tree component whose key ends in `key`."""
    drawn = [c for c in at.get("bidi_component") if c.proto.id.endswith(key)]
    return {n["id"]: n for n in json.loads(drawn[0].proto.json)["scene"]["nodes"]}


def test_tour_host_tier_walk_demotes_then_loads_back():
    """?walk=host-tier: scenarios/hosttier.py's chats one tier event at a time (10 frames: the
    empty cache, then A inserted, backed up; A demoted, B inserted, backed up; A split 5 + 1,
    B demoted, A's 5 loaded back, A's last token restored). Frame 3 is the demotion (node #1
    outlined, host only, its move "demote" for the tree view to play); frame 8 is the load back
    onto node #3 (A's first 5 tokens, on both tiers now: green, move "load") while #1 (A's last
    token) and #2 (B) are host only (orange)."""
    at = page("tour")
    at.query_params["walk"], at.query_params["step"] = "host-tier", "3"
    at.run()
    assert not at.exception
    assert texts(at.info) == ["chat B: node #1 demoted: its 6 device slots freed, its host copy "
                              "kept"]
    n1 = _tier_nodes(at, "tour.host-tier.tree")["n1"]
    assert (n1["label"], n1["fill"], n1["stroke"], n1["move"]) == (
        "#1: 1 2 3 4 5 6\nhost only", "#ff7f0e", "#d62728", "demote")
    at.slider(key="tour.host-tier.scrub.3").set_value(8).run()
    assert texts(at.info) == ["chat A again: loaded back from host: 5 tokens onto node(s) #3"]
    nodes = _tier_nodes(at, "tour.host-tier.tree")
    assert [(i, n["fill"], n.get("move")) for i, n in nodes.items()] == [
        ("n0", "#eeeeee", None), ("n1", "#ff7f0e", None), ("n2", "#ff7f0e", None),
        ("n3", "#2ca02c", "load")]
    m = metrics(at)
    assert (m["device only"], m["device + host copy"], m["host only"]) == (
        "0 node(s)", "1 node(s)", "2 node(s)")
    at.button(key="tour.host-tier.b_end").click().run()
    shown = " ".join(texts(at.markdown))
    assert "chat A again: 0 tokens from the device, 5 loaded back from host, 1 computed" in shown
    # the slides export, as the other walks have (its content: tests/viz/test_viz_export.py),
    # its frames built once its panel is open
    assert "downloads.tour.host-tier.export_dl" not in [b.key for b in at.button]
    at.session_state["tour_tier.export_open"] = True
    at.run()
    assert "downloads.tour.host-tier.export_dl" in [b.key for b in at.button]
