"""AppTest for the scheduler page: the sort, the loud fallback at 129, the cold burst numbers."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGE = Path(__file__).resolve().parent.parent / "pages" / "scheduler.py"


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _page() -> AppTest:
    return AppTest.from_file(str(PAGE), default_timeout=60).run()


def test_default_lpm_and_the_burst_table():
    """24 waiting under LPM: 7 deprioritized, q021 (2,665 cached) first; no warning. Burst:
    128,000 / 2,000 / 16,000 prefix tokens; LPM deprioritizes 63 and still admits 8."""
    at = _page()
    assert not at.exception and not at.error and not at.warning
    assert _metrics(at) == {"policy that ran": "lpm", "waiting": "24", "deprioritized": "7",
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
    assert "8 x 2,016 = 16,128 fit the budget, the next needs 2,016 with 256 left" in text
    rounds = at.dataframe[2].value
    assert list(rounds["requests"]) == [8, 56] and list(rounds["prefix prefilled"]) == [16_000, 0]


def test_fallback_warning_at_129_not_128():
    at = _page()
    at.slider(key="scheduler.n").set_value(128).run()
    assert not at.warning and _metrics(at)["policy that ran"] == "lpm"
    at.slider(key="scheduler.n").set_value(129).run()
    assert not at.exception
    assert len(at.warning) == 1
    assert at.warning[0].value.startswith("LPM fell back to FCFS: 129 requests wait, more than 128")
    assert _metrics(at)["policy that ran"] == "fcfs" and _metrics(at)["first offered"] == "q000"


def test_fcfs_and_thresholds_and_own_budget():
    """FCFS: nobody deprioritized, arrival order. LPM with deprioritize 16: 10 wait. Own budget
    8,192 under LPM: round one admits 4."""
    at = _page()
    at.selectbox(key="scheduler.policy").set_value("fcfs").run()
    assert _metrics(at)["deprioritized"] == "0" and _metrics(at)["first offered"] == "q000"
    at.selectbox(key="scheduler.policy").set_value("lpm")
    at.slider(key="scheduler.depri").set_value(16).run()
    assert _metrics(at)["deprioritized"] == "10"
    at.selectbox(key="scheduler.burst_run").set_value("my own budget").run()
    assert not at.exception
    assert list(at.dataframe[2].value["requests"]) == [4, 60]
