"""The "Watch a server" page and its pictures, against an in-process publisher (no model).

AppTest: the page renders with nothing to watch; connected to a publisher it shows each
worker's status row, block grid and prefix tree; a bad endpoint is one error line. viz/cluster.py:
the grid snapshot, the tree's scene (laid out by viz/scene.py) and its folding, the rates.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from apphelp import plain
from machine import seconds
from streamlit.testing.v1 import AppTest

from engine.kv_publisher import ZmqEventPublisher
from radix.blocks.kv_events import EventBatch
from radix.events import BlockRemoved, BlockStored
from scenarios.watch import WatchSession, api_base
from viz.cluster import fit_prefix_tree_scene, grid_snapshot, prefix_tree_scene
from viz.watch_charts import chart_height, rates_chart, worker_grid_chart

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "watch.py")


def _stored(hashes, parent, first_token=0):
    tokens = tuple(range(first_token, first_token + 2 * len(hashes)))
    return BlockStored(tuple(hashes), parent, tokens, 2, None, "GPU", None)


@pytest.fixture
def publisher():
    pub = ZmqEventPublisher(0, "tcp://*:0", "tcp://*:0")
    pub.publish(EventBatch(1.0, (_stored([1, 2, 3], None),)))
    pub.publish(EventBatch(2.0, (_stored([4], 1, 50), _stored([5, 6], None, 90))))
    pub.publish(EventBatch(3.0, (BlockRemoved((5,), "GPU", 0),)))
    yield pub
    pub.close()


def _views_when(session: WatchSession, blocks: int):
    deadline = time.monotonic() + seconds(20)
    while True:
        views = session.views()
        if views and len(views[0].blocks) == blocks:
            return views
        assert time.monotonic() < deadline, views and views[0].status
        time.sleep(0.05)


def test_page_renders_with_nothing_to_watch():
    at = AppTest.from_file(PAGE, default_timeout=seconds(60)).run()
    assert not at.exception
    assert "Not watching" in at.info[0].value


def test_page_connects_and_draws_each_worker(publisher):
    at = AppTest.from_file(PAGE, default_timeout=seconds(60)).run()
    at.text_area(key="watch.endpoints").set_value(
        f"{publisher.endpoint},{publisher.replay_endpoint}")
    at.button(key="watch.connect").click().run()
    assert not at.exception and not at.error
    session = at.session_state["watch.session"]
    try:
        _views_when(session, 5)
        at.run()
        assert not at.exception
        (row,) = at.dataframe[0].value.to_dict("records")
        assert row["blocks"] == 5 and row["view"] == "exact" and row["next seq"] == 3
        assert any("5 blocks of 2 tokens cached" in c.value for c in at.caption)
        assert at.button(key="watch.send").disabled  # no base URL: nothing to send to
    finally:
        session.close()


def test_a_bad_endpoint_is_one_error_line():
    at = AppTest.from_file(PAGE, default_timeout=seconds(60)).run()
    at.text_area(key="watch.endpoints").set_value("localhost:5557")
    at.button(key="watch.connect").click().run()
    assert not at.exception
    assert "tcp://" in plain(at.error[0].value) and "\n" not in at.error[0].value


def test_pictures_of_a_watched_worker(publisher):
    """Blocks 1-2-3 (a chain), 4 under 1, 6 whose parent 5 was removed: 5 blocks, block 6
    unreachable; runs root->[1], [1]->[2,3], [1]->[4], orphan [6]; the DOT lays out."""
    session = WatchSession([f"{publisher.endpoint},{publisher.replay_endpoint}"])
    try:
        (view,) = _views_when(session, 5)
    finally:
        session.close()
    snap = grid_snapshot(view)
    assert [(s.id, s.state) for s in snap.blocks] == [
        (1, "cached_free"), (2, "cached_free"), (3, "cached_free"), (4, "cached_free"),
        (5, "unreachable")]
    assert snap.blocks[3].parent == 1  # block 4's parent (hash 1) is cell 1
    grid = worker_grid_chart(view)
    cells = grid["series"][0]["data"]  # [column, row, state]: 0 cached, 1 unreachable
    assert [c["value"] for c in cells] == [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0],
                                           [4, 0, 1]]
    assert "stored by batch seq 1" in cells[3]["name"]
    names = [p["label"] for p in grid["visualMap"]["pieces"]]
    assert names == ["cached (stored, not removed)", "unreachable (an ancestor was removed)"]
    assert chart_height(grid) == 200  # one row
    scene = prefix_tree_scene(view)
    labels = sorted(n["label"] for n in scene["nodes"])
    assert labels == ["1 blk", "1 blk", "1 blk", "2 blk", "root"]
    folded = prefix_tree_scene(view, max_children=1)
    assert any(n["label"].startswith("+") for n in folded["nodes"])
    assert [s["name"] for s in rates_chart([view])["series"]] == [
        f"{view.name.removeprefix('tcp://')} stored", f"{view.name.removeprefix('tcp://')} removed"]


def test_presenter_mode_folds_a_workers_tree_to_fit_its_column():
    """Presenter mode (#24 item 4): 12 one-block runs under the root, in one of two side-by-side
    columns (1,084 / 2 = 542 px wide, 360 px tall). Unfolded (10 runs and "+2 more") the scene
    is 881.3 units wide: at 14 px labels (9-unit edge labels) (881.3 + 16) x 14 / 9 = 1,396 px,
    over 542. Folded by FIT_CAPS until it fits: 2 runs and "+10 more", 240.5 units (399 px)."""
    from types import SimpleNamespace as N

    from viz.fold import fits

    blocks = [N(block_hash=i, token_ids=tuple(range(16))) for i in range(1, 13)]
    view = N(blocks=blocks, runs=[N(id=i, parent=None, block_hashes=(i,), orphan=False)
                                  for i in range(1, 13)])
    whole = prefix_tree_scene(view)
    assert whole["width"] == 881.3 and not fits(whole, 542, 360, 14)
    scene = fit_prefix_tree_scene(view, None, 542, 360, 14)
    assert fits(scene, 542, 360, 14) and scene["width"] == 240.5
    assert [n["label"] for n in scene["nodes"]] == ["root", "1 blk", "1 blk", "+10 more"]
    assert fit_prefix_tree_scene(view, None, 2_000, 360, 14) == whole  # fits: not folded


def test_api_base_adds_the_scheme_and_v1():
    assert api_base("127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    session = WatchSession(["tcp://127.0.0.1:1"], replay_timeout=0.1)
    try:
        with pytest.raises(ValueError, match="base URL"):
            session.tokenize("x")
    finally:
        session.close()


def test_a_view_that_received_nothing_does_not_say_exact():
    """Connected to a PUB endpoint nobody publishes on (no replay endpoint): 0 blocks, and the
    row and the caption say UNKNOWN and why, never "exact"."""
    at = AppTest.from_file(PAGE, default_timeout=seconds(60)).run()
    at.text_area(key="watch.endpoints").set_value("tcp://127.0.0.1:1")
    at.button(key="watch.connect").click().run()
    session = at.session_state["watch.session"]
    try:
        deadline = time.monotonic() + seconds(20)
        while not session.views()[0].status.unknown_why:  # the first poll has run
            assert time.monotonic() < deadline
            time.sleep(0.05)
        at.run()
        assert not at.exception
        (row,) = at.dataframe[0].value.to_dict("records")
        assert row["blocks"] == 0 and row["view"] == (
            "UNKNOWN: nothing received yet (no replay endpoint to catch up from)")
        assert not any("exact" in c.value for c in at.caption)
    finally:
        session.close()


def test_discover_refuses_publishers_that_connect_out(monkeypatch):
    """/kv_events with pub_binds false (engine serve --kv-events-connect): nothing listens at
    the advertised endpoint, so discover says so instead of handing it to a watcher."""
    import scenarios.watch as watch
    answer = {"publishers": [{"rank": 0, "endpoint": "tcp://10.0.0.9:5557",
                              "replay_endpoint": "tcp://*:5567", "pub_binds": False}]}
    monkeypatch.setattr(watch, "http_json", lambda url, body=None, timeout=30.0: (answer, {}))
    with pytest.raises(ValueError, match="connect out to tcp://10.0.0.9:5557"):
        watch.discover("http://h:8000")
    answer["publishers"][0]["pub_binds"] = True
    assert watch.discover("http://h:8000") == ["tcp://10.0.0.9:5557,tcp://h:5567"]


def test_table_rates_are_the_last_five_seconds():
    """The table's stored/s: bins of 0, 12, 0, 8, 0 blocks (1 s each, the last the second under
    way) -> (0 + 12 + 0 + 8 + 0) / 5 = 4.0 per second; it showed the last bin, 0, while events
    arrived in bursts (#24 item 8). Fewer bins than five: their mean; none: 0."""
    from radix.watch.rates import RateBin
    from viz.cluster import recent

    bins = [RateBin(float(i), s, 0.0) for i, s in enumerate([3, 0, 12, 0, 8, 0])]
    assert recent(bins, "stored_per_s") == 4.0
    assert recent(bins[:2], "stored_per_s") == 1.5 and recent([], "stored_per_s") == 0.0


def test_messages_put_the_system_prompt_first():
    """The overlap box and send take an optional system prompt: [system, user]; a blank one
    is left out (one user message, as before)."""
    from scenarios.watch import messages

    assert messages("hi", "Be brief.") == [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "hi"}]
    assert messages("hi", "  ") == [{"role": "user", "content": "hi"}]
