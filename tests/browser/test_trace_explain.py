"""A real browser on the Trace debugger's "Why this hit rate?" panel: open it on the Mooncake
excerpt, see the buckets drawn, then a bucket's request button moves the step box."""

from __future__ import annotations

import pytest
from browserhelp import IDLE, ROOT, shoot, wait_drawn
from machine import ms

pytestmark = pytest.mark.browser


def test_panel_opens_draws_and_moves_the_step(server, page, tmp_path):
    """The excerpt's 200 requests hold 2,663,480 prompt tokens (the chart's title). Its first
    request is first seen only, so the first bucket button of the tree's first-seen bucket
    names a request whose lookup step the step box then shows."""
    page.goto(f"{server}/trace")
    page.wait_for_selector("[data-testid=stFileUploaderDropzoneInput]", state="attached",
                           timeout=ms(60_000))
    sample = ROOT / "examples" / "traces" / "mooncake_excerpt.jsonl"
    page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(sample))
    page.get_by_text("Invariants held after every request.").wait_for(timeout=ms(240_000))
    page.get_by_text("Why this hit rate?").click()  # its time: benchmarks/trace_explain.py
    page.get_by_text("Where the 2,663,480 prompt tokens went").wait_for(timeout=ms(240_000))
    page.wait_for_selector(IDLE, timeout=ms(240_000))
    button = page.locator(".st-key-trace-explain_go-tree-first_seen-0 button")
    label = button.inner_text()
    step = int(label.rsplit("step ", 1)[1].replace(",", ""))
    button.click()
    page.wait_for_function(
        f"() => document.querySelector('.st-key-trace-box input')?.value === '{step}'",
        timeout=ms(60_000))
    wait_drawn(page)
    shoot(page, tmp_path, "trace_explain.png")
