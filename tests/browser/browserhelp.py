"""Helpers for the browser tests: waiting until a page is drawn, screenshots, clicks, checks."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from machine import ms, seconds

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "docs" / "screenshots"
TREE = ".radixlens-tree"
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"
DRAWN = """() => {
  const every = (sel, ok) => [...document.querySelectorAll(sel)].every(ok);
  return every("[data-testid=stBidiComponentRegular]",
               (c) => (c.querySelector(".radixlens-tree") || {dataset: {}})
                             .dataset.animating === "0")
    && every("[data-testid=stPlotlyChart]", (c) => c.querySelector(".main-svg"))
    && every("[data-testid=stEChartsChart]", (c) => c.querySelector("svg path"))
    && every("[data-testid=stGraphVizChart]", (c) => c.querySelector("svg"))
    && every("[data-testid=stDataFrame]", (c) => c.querySelector("canvas, table"));
}"""
# The tree view has drawn a scene after the `before`-th and its transition has ended.
REDRAWN = """(before) => {
  const t = document.querySelector(".radixlens-tree");
  return !!t && Number(t.dataset.renders || 0) > before && t.dataset.animating === "0";
}"""
# Text that does not fit its box: SVG node labels wider than their rect, and any element of the
# page (outside SVG) holding text of its own whose content is wider than its box (cut, or
# ellipsed: metric labels and values, buttons, alerts, select boxes, tabs, captions).
CLIPPED = """() => {
  const out = [];
  document.querySelectorAll(".radixlens-tree g.node").forEach((g) => {
    const r = g.querySelector("rect"), t = g.querySelector("text");
    if (!r || !t || t.getComputedTextLength() === 0) return;
    let w = 0;
    t.querySelectorAll("tspan").forEach((s) => { w = Math.max(w, s.getComputedTextLength()); });
    if (w > Number(r.getAttribute("width")) + 0.5) out.push(`node ${g.id}: ${t.textContent}`);
  });
  document.querySelectorAll("[data-testid=stMain] *").forEach((e) => {
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || e.closest("svg") || e.clientWidth === 0) return;
    const where = (e.closest("[data-testid]") || {dataset: {}}).dataset.testid;
    if (e.scrollWidth > e.clientWidth + 1) out.push(`${where}: ${e.textContent}`);
  });
  return out;
}"""
# Text too small for a projector, and plotly's toolbar over a button: chart text (plotly's and
# ECharts' SVG: legends, titles, ticks, labels) under 12 px, tree labels (nodes' and edges', in
# the tree view and in Graphviz charts: the Cluster page's trees) drawn under 14 px (their font
# size times the view's scale on screen), and any toolbar
# (.modebar, present though faded until hovered) whose box meets an updatemenu button or a
# Streamlit button.
ILLEGIBLE = """() => {
  const out = [];
  document.querySelectorAll("[data-testid=stPlotlyChart] svg text, "
                            + "[data-testid=stEChartsChart] svg text").forEach((t) => {
    const px = parseFloat(getComputedStyle(t).fontSize);
    if (t.textContent.trim() && px < 12) out.push(`chart ${px}px: ${t.textContent}`);
  });
  document.querySelectorAll(".radixlens-tree g.node text, .radixlens-tree g.edge text, "
                            + "[data-testid=stGraphVizChart] svg text").forEach((t) => {
      const px = parseFloat(t.getAttribute("font-size")) * t.getScreenCTM().a;
      if (t.textContent.trim() && t.getBoundingClientRect().height > 0 && px < 13.95)
        out.push(`tree ${px.toFixed(1)}px: ${t.textContent}`);
    });
  const meets = (a, b) => a.width && b.width && a.left < b.right && b.left < a.right
    && a.top < b.bottom && b.top < a.bottom;
  const buttons = [...document.querySelectorAll(".updatemenu-button, [data-testid=stButton]")];
  document.querySelectorAll(".modebar").forEach((m) => buttons.forEach((b) => {
    if (meets(m.getBoundingClientRect(), b.getBoundingClientRect()))
      out.push(`toolbar over ${b.textContent}`);
  }));
  return out;
}"""

# Edge lines drawn through edge labels: points along every tree edge's path (every 2 px on
# screen) that fall inside a label's box (shrunk 1 px), as "edge id: label".
THROUGH = """() => {
  const out = [], labels = [...document.querySelectorAll(".radixlens-tree g.edge text")]
    .filter((t) => t.textContent.trim()).map((t) => [t, t.getBoundingClientRect()]);
  document.querySelectorAll(".radixlens-tree g.edge path").forEach((p) => {
    const m = p.getScreenCTM(), len = p.getTotalLength(), step = 2 / (m.a || 1);
    for (let s = 0; s <= len; s += step) {
      const q = p.getPointAtLength(s), x = m.a * q.x + m.e, y = m.d * q.y + m.f;
      const hit = labels.find(([, r]) => x > r.left + 1 && x < r.right - 1 && y > r.top + 1
        && y < r.bottom - 1);
      if (hit) { out.push(`${p.parentNode.id}: ${hit[0].textContent}`); break; }
    }
  });
  return out;
}"""

# For `span` ms, every frame: which charts (ECharts with the SVG renderer, or plotly) and trees
# are painted (an svg with content), named by their st-key class; the count at the start, the
# fewest seen, the first frames where one that was painted at the start was not ("gone": no
# element; "not painted": an element without its svg, as a re-mounted chart is until drawn),
# how many script runs (fragment refreshes too) started, and the script state's changes.
PAINTED = """(span) => new Promise((done) => {
  const named = (e, i) => ([...(e.closest("[class*=st-key-]") || e).classList]
    .find((c) => c.startsWith("st-key-")) || `#${i}`);
  const items = () => {
    const out = new Map();
    const add = (kind, sel, inner) => [...document.querySelectorAll(sel)].forEach((c, i) => {
      const painted = c.querySelector(inner) && c.getBoundingClientRect().height > 0;
      out.set(`${kind} ${named(c, i)}`, painted ? "ok" : "not painted");
    });
    add("echarts", "[data-testid=stEChartsChart]", "svg path");
    add("plotly", "[data-testid=stPlotlyChart]", ".main-svg");
    add("tree", ".radixlens-tree", "g.node");
    return out;
  };
  const count = (m) => [...m.values()].filter((v) => v === "ok").length;
  const app = document.querySelector("[data-testid=stApp]"), t0 = performance.now();
  const ms = () => Math.round(performance.now() - t0);
  const start = items(), first = count(start), blank = [], states = [];
  let least = first, runs = 0, was = null;
  const look = () => {
    const now = items(), n = count(now);
    least = Math.min(least, n);
    if (n < first && blank.length < 8) blank.push([...start.keys()]
      .filter((k) => start.get(k) === "ok" && now.get(k) !== "ok")
      .map((k) => `${k}: ${now.get(k) || "gone"}`).join(", ") + ` @${ms()} ms`);
    const state = app.dataset.testScriptState;
    if (state !== was) states.push(`${state}@${ms()}`);
    if (state !== was && state === "running") runs += 1;
    was = state;
    if (performance.now() - t0 < span) requestAnimationFrame(look);
    else done({first, least, runs, blank, states});
  };
  look();
})"""


def wait_drawn(pg, timeout_ms: int | None = None) -> None:
    """The script has finished its run and everything it put on the page has been drawn
    (each wait up to `timeout_ms`; by default 180 s on an idle machine, times the factor)."""
    timeout_ms = timeout_ms or ms(180_000)
    # a page that raised draws an exception box and no title: fail at once, saying what it was
    pg.wait_for_selector("h1, [data-testid=stException]", timeout=timeout_ms)
    boxes = pg.locator("[data-testid=stException]")
    assert boxes.count() == 0, f"the page raised: {boxes.first.inner_text()[:500]}"
    pg.wait_for_selector(IDLE, timeout=timeout_ms)
    pg.wait_for_function(DRAWN, timeout=timeout_ms)
    pg.wait_for_selector(IDLE, timeout=timeout_ms)


def shoot(pg, tmp_path: Path, name: str, full: bool = True) -> None:
    """A screenshot into tmp_path (and docs/screenshots with RADIXLENS_UPDATE_SCREENSHOTS=1).
    full: Streamlit scrolls inside its main block, so the viewport is made as tall as the
    content (at most 6,000 px) for the picture, then put back."""
    size = pg.viewport_size
    if full:
        tall = pg.evaluate("() => (document.querySelector('[data-testid=stMain]') || "
                           "document.body).scrollHeight")
        pg.set_viewport_size({"width": size["width"],
                              "height": max(size["height"], min(tall, 6000))})
        pg.wait_for_function(DRAWN, timeout=ms(60_000))
    pg.screenshot(path=str(tmp_path / name))
    pg.set_viewport_size(size)
    if os.environ.get("RADIXLENS_UPDATE_SCREENSHOTS"):  # refresh the README's pictures
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / name, SHOTS / name)


def alert(pg) -> str:
    return pg.inner_text("[data-testid=stAlert]")


def click_and_wait(pg, name: str) -> str:
    """Clicks the button `name` and waits for the first alert's text to change."""
    before = alert(pg)
    pg.get_by_role("button", name=name).first.click()
    pg.wait_for_function(
        "b => (document.querySelector('[data-testid=stAlert]') || {}).innerText !== b",
        arg=before, timeout=ms(30_000))
    return alert(pg)


def click_and_redraw(pg, name: str) -> str:
    """Clicks the button `name` and waits until the tree view has drawn the new frame and
    settled; returns the first alert's new text.

    subtle: the alert's new text arrives as soon as Streamlit sends it, before the rerun
    reaches the tree component, so waiting for the text and then DRAWN could read the previous
    frame's tree, settled (test_lock_walk_of_five_hops_hop_by_hop read no lock highlighted, or
    the hop before, whenever the browser was slower than the server). The tree's render
    counter moving past its count before the click is the new frame.
    """
    before = int(pg.eval_on_selector(TREE, "e => e.dataset.renders || 0"))
    text = click_and_wait(pg, name)
    pg.wait_for_function(REDRAWN, arg=before, timeout=ms(60_000))
    pg.wait_for_function(DRAWN, timeout=ms(60_000))
    return text


def click_next_until(pg, text: str, limit: int = 40) -> None:
    for _ in range(limit):
        if pg.get_by_text(text).count():
            return
        click_and_wait(pg, "next ▶")
    raise AssertionError(f"never saw {text!r}")


def download(pg, name: str, tmp_path: Path, timeout_ms: int = 60_000) -> Path:
    """Clicks the download link whose words start with `name` (pages/_downloads.py: a file the
    server wrote, fetched from disk) and saves what arrives to tmp_path; its path."""
    link = pg.locator("a.rl-download", has_text=name).first
    link.wait_for(timeout=ms(timeout_ms))
    with pg.expect_download(timeout=ms(timeout_ms)) as info:
        link.click()
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(path)
    return path


def export_offline(pg, menu: str, tmp_path: Path, name: str, timeout_ms: int):
    """Opens the `menu` expander, writes its "animated HTML of frames" (the button), downloads
    it (the link) to tmp_path/name and opens the file in a fresh context that refuses every
    network request: (the file's text, the viewer page, the URLs it tried to fetch, the context
    to close)."""
    pg.get_by_text(menu).click()
    button = pg.get_by_role("button", name="animated HTML of frames")
    button.wait_for(timeout=ms(30_000))
    button.click()
    got = download(pg, "animated HTML of frames", tmp_path, timeout_ms)
    path = tmp_path / name
    got.rename(path)
    offline = pg.context.browser.new_context()
    viewer = offline.new_page()
    fetched: list[str] = []
    viewer.route("**/*", lambda route: (fetched.append(route.request.url), route.abort())
                 if not route.request.url.startswith("file:") else route.continue_())
    viewer.goto(path.as_uri())
    return path.read_text(), viewer, fetched, offline


def in_viewport(pg, selector: str) -> bool:
    """The element is entirely inside the viewport, without scrolling."""
    box = pg.locator(selector).first.bounding_box()
    size = pg.viewport_size
    return (box is not None and box["y"] >= 0 and box["x"] >= 0
            and box["y"] + box["height"] <= size["height"]
            and box["x"] + box["width"] <= size["width"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(err_path, *extra: str, env: dict[str, str] | None = None
                 ) -> tuple[subprocess.Popen, str]:
    """A Streamlit server for app.py; returns (process, base URL) once it accepts connections.
    `env`: variables added to this process's environment for the server."""
    port = _free_port()
    err = open(err_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false", *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + seconds(60)
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            assert proc.poll() is None, open(err_path).read()[-2000:]
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the server did not start in {seconds(60):.0f} s")
