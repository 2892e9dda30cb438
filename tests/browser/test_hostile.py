"""Uploaded text stays text: Markdown and HTML in every field the app echoes, and no request to
another host. The browser routes every request; any to a host other than the app's fails the
test. A probe first shows that an outside request would be seen."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest
from browserhelp import IDLE, wait_drawn
from machine import ms

pytestmark = pytest.mark.browser
EVIL = "evil.test"


def _md(tag: str) -> str:
    """A Markdown image and an HTML image, both pointing at the outside host."""
    return f"![x](http://{EVIL}/{tag}.png) <img src='http://{EVIL}/{tag}-html.png'>"


def _lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _files(tmp_path) -> list:
    """One upload per echoed field: a rid in a good trace (tables, chains, search), a
    duplicate rid, an unknown field name, a KV event type, an op rid and its error, a file
    name (no slash in a name: 'http:host' still parses as http://host/)."""
    rid = _md("rid")
    out = {
        "rid.jsonl": _lines([{"rid": rid, "arrival": 0, "tokens": list(range(40)),
                              "output_len": 1},
                             {"rid": rid + "2", "arrival": 1, "tokens": list(range(36)),
                              "output_len": 1}]),
        "dup.jsonl": _lines([{"rid": _md("dup"), "arrival": 0, "tokens": [1], "output_len": 1}]
                            * 2),
        "field.jsonl": _lines([{"rid": "a", "arrival": 0, "tokens": [1], "output_len": 1,
                                _md("field"): 1}]),
        "kv.jsonl": _lines([{"ts": 0, "events": [{"type": _md("kvtype")}]}]),
        "ops.jsonl": _lines([{"op": "start", "rid": _md("op"), "tokens": [1, 2, 3]},
                             {"op": "finished", "rid": _md("op")},
                             {"op": "finished", "rid": _md("op")}]),
        f"![x](http:{EVIL}).jsonl": _lines([{"rid": "a", "arrival": 0, "tokens": "no",
                                             "output_len": 1}]),
    }
    paths = []
    for name, text in out.items():
        p = tmp_path / name
        p.write_text(text)
        paths.append(p)
    return paths


def _watch(pg) -> list[str]:
    """Every request the page makes to a host other than the app's, as it happens."""
    outside: list[str] = []

    def check(route) -> None:
        host = urlparse(route.request.url).hostname
        if host not in ("127.0.0.1", "localhost"):
            outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    pg.route("**/*", check)
    return outside


def test_uploads_never_make_the_browser_fetch_outside(server, page, tmp_path):
    outside = _watch(page)
    page.goto(f"{server}/trace")
    wait_drawn(page)
    page.evaluate(f"() => fetch('http://{EVIL}/probe').catch(() => null)")
    page.wait_for_function("() => true")
    assert outside == [f"http://{EVIL}/probe"], "the watch must see an outside request"
    outside.clear()
    for path in _files(tmp_path):
        page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(path))
        page.wait_for_selector(IDLE, timeout=ms(120_000))
        page.wait_for_selector("[data-testid=stAlert], h3", timeout=ms(120_000))
        wait_drawn(page)
        text = page.inner_text("[data-testid=stMain]")
        assert "Traceback" not in text, path.name
    # the good trace's rid in the search box too: its results are buttons labelled with it
    page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(tmp_path / "rid.jsonl"))
    page.get_by_text("Replay summary").wait_for(timeout=ms(120_000))
    page.wait_for_selector(IDLE, timeout=ms(120_000))
    page.get_by_label("find a request id").fill("x")
    page.keyboard.press("Enter")
    page.wait_for_selector(IDLE, timeout=ms(60_000))
    wait_drawn(page)
    assert page.get_by_text(f"http://{EVIL}/rid.png", exact=False).count() >= 1  # shown as text
    assert outside == [], outside


def test_configs_upload_and_live_prompt_stay_text(server, page, tmp_path):
    outside = _watch(page)
    page.goto(f"{server}/configs")
    wait_drawn(page)
    page.get_by_text("an uploaded trace").click()
    page.wait_for_selector("[data-testid=stFileUploaderDropzoneInput]", state="attached")
    path = tmp_path / "rid.jsonl"
    path.write_text(_lines([{"rid": _md("cfg"), "arrival": 0, "tokens": [1, 2, 3],
                             "output_len": 1}, {"rid": "b", "arrival": 0, "tokens": "x"}]))
    page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(path))
    page.wait_for_selector("[data-testid=stAlert]", timeout=ms(120_000))
    wait_drawn(page)
    assert outside == [], outside
