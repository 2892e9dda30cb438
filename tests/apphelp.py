"""Helpers for the AppTests: pages by name, plain text of escaped Markdown, metrics, jobs.

Waits scale with the machine factor (tests/machine.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from machine import seconds
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def page(name: str, timeout: float | None = None) -> AppTest:
    """The page's AppTest; each run may take `timeout` s (60 s on an idle machine, scaled)."""
    return AppTest.from_file(str(ROOT / "pages" / f"{name}.py"),
                             default_timeout=timeout or seconds(60))


def plain(text: str) -> str:
    """Escaped Markdown back to the text a reader sees: '\\#1' -> '#1'."""
    return re.sub(r"\\(.)", r"\1", text)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def texts(elements) -> list[str]:
    return [plain(e.value) for e in elements]


def plotly_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def echarts(at: AppTest) -> list[tuple[str, dict]]:
    """Each ECharts chart on the page: (element id, option). A keyed chart keeps its id from
    run to run (its picture changes in place)."""
    return [(el.proto.id, json.loads(el.proto.spec)) for el in at.get("echarts_chart")]


def finish_jobs(at: AppTest, timeout: float | None = None) -> AppTest:
    """Waits for the page's background job (a replay, a simulation), then reruns the page (the
    progress fragment's timer does not tick in AppTest). Each job may take `timeout` s (300 s on
    an idle machine, scaled)."""
    timeout = timeout or seconds(300)
    from pages._serve import holdings

    jobs = [at.session_state["configs.job"]] if "configs.job" in at.session_state else []
    sid = at.session_state["trace.sid"] if "trace.sid" in at.session_state else None
    state = holdings().get(sid, "trace") if sid else None
    if state is not None and state.get("job") is not None:
        jobs.append(state["job"])
    for job in jobs:
        assert job.wait(timeout), f"{job.name}: still running after {timeout} s"
    return at.run()
