"""Helpers for the AppTests: pages by name, plain text of escaped Markdown, metrics, jobs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def page(name: str, timeout: float = 60) -> AppTest:
    return AppTest.from_file(str(ROOT / "app_pages" / f"{name}.py"), default_timeout=timeout)


def plain(text: str) -> str:
    """Escaped Markdown back to the text a reader sees: '\\#1' -> '#1'."""
    return re.sub(r"\\(.)", r"\1", text)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def texts(elements) -> list[str]:
    return [plain(e.value) for e in elements]


def plotly_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def finish_jobs(at: AppTest, timeout: float = 300) -> AppTest:
    """Waits for the page's background job (a replay, a simulation), then reruns the page (the
    progress fragment's timer does not tick in AppTest)."""
    for key in ("trace.state", "configs.job"):
        if key in at.session_state:
            value = at.session_state[key]
            job = value.get("job") if isinstance(value, dict) else value
            if job is not None:
                assert job.wait(timeout), f"{key}: still running after {timeout} s"
    return at.run()
