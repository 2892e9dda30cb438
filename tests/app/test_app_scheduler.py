"""AppTest for the scheduler page: the sort with the tree and blocks it read, the loud fallback
at 129, the cold burst numbers."""

from __future__ import annotations

from apphelp import echarts, metrics, page


def test_default_lpm_and_the_burst_table():
    """24 waiting under LPM: 7 deprioritized, q021 (2,665 cached) first; no warning. Burst:
    128,000 / 2,000 / 16,000 prefix tokens; LPM deprioritizes 63 and still admits 8."""
    at = page("scheduler").run()
    assert not at.exception and not at.error and not at.warning
    assert metrics(at) == {"policy that ran": "lpm", "waiting": "24", "deprioritized": "7",
                           "first offered": "q021"}
    queue = at.dataframe[0].value
    assert list(queue["rid"][:2]) == ["q021", "q015"] and list(queue["cached match"][:2]) == [
        2665, 2455]
    burst = at.dataframe[1].value
    assert list(burst["prefix tokens prefilled"]) == [128_000, 2_000, 16_000]
    assert list(burst["round 1 admits"]) == [64, 1, 8]
    assert list(burst["deprioritized in round 1"]) == [0, 0, 63]
    assert list(burst["duplicate prefills"]) == [63, 0, 7]
    text = next(md.value for md in at.markdown if "No budget, FCFS" in md.value)
    assert "**128,000**" in text and "**2,000**" in text and "5.7 s" in text
    assert "deprioritizes **63**, yet round one admits **8**" in text
    rounds = at.dataframe[2].value
    assert list(rounds["requests"]) == [8, 56] and list(rounds["prefix prefilled"]) == [16_000, 0]


def test_tree_and_blocks_beside_the_sort():
    """The tree view and vLLM's grid for the warm state: q021's cached chain outlined (166
    blocks), and its path drawn in the tree. The grid is a keyed ECharts chart: another request
    shown outlines its chain in the same element (#24: a plotly grid was re-mounted blank)."""
    at = page("scheduler").run()
    assert at.selectbox(key="scheduler.show").value == "q021"
    ((first, grid),) = echarts(at)
    chain = next(s["data"] for s in grid["series"] if s.get("name") == "hash chain")
    assert len(chain) == 2_665 // 16
    other = at.selectbox(key="scheduler.show").options[1]
    at.selectbox(key="scheduler.show").set_value(other).run()
    ((now, grid),) = echarts(at)
    assert now == first and other in grid["title"]["text"]
    assert len(at.get("bidi_component")) >= 1 or at.session_state["scheduler.show"] == "q021"


def test_fallback_warning_at_129_not_128():
    at = page("scheduler").run()
    at.slider(key="scheduler.n").set_value(128).run()
    assert not at.warning and metrics(at)["policy that ran"] == "lpm"
    at.slider(key="scheduler.n").set_value(129).run()
    assert not at.exception
    assert len(at.warning) == 1
    assert at.warning[0].value.startswith("LPM fell back to FCFS: 129 requests wait, more than 128")
    assert metrics(at)["policy that ran"] == "fcfs" and metrics(at)["first offered"] == "q000"


def test_fcfs_and_thresholds_and_own_budget():
    """FCFS: nobody deprioritized, arrival order. LPM with deprioritize 16: 10 wait. Own budget
    8,192 under LPM: round one admits 4."""
    at = page("scheduler").run()
    at.selectbox(key="scheduler.policy").set_value("fcfs").run()
    assert metrics(at)["deprioritized"] == "0" and metrics(at)["first offered"] == "q000"
    # the match shown follows the switch: FCFS's first offered, not LPM's q021 (issue 41)
    assert at.selectbox(key="scheduler.show").value == "q000"
    assert any("q000's match in blue" in m.value for m in at.markdown)
    at.selectbox(key="scheduler.policy").set_value("lpm")
    at.slider(key="scheduler.depri").set_value(16).run()
    assert metrics(at)["deprioritized"] == "10"
    at.selectbox(key="scheduler.burst_run").set_value("my own budget").run()
    assert not at.exception
    assert list(at.dataframe[2].value["requests"]) == [4, 60]
