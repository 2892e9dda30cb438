"""The tree view's bundle in a bare page, for the benchmark and the browser tests (no Streamlit).

`open_bundle(page, bundle)` serves the built JS to a Playwright page under a fake origin and
mounts it the way Streamlit does (`default({data, parentElement, setTriggerValue})`);
`draw_step(page, data)` sends one data dict and times it in the browser: `drawn` (data in ->
first frame painted), `settled` (-> the transition ended; for the old d3-graphviz bundle, which
has no end mark, drawn + its duration) and the frames painted meanwhile. The trees to draw come
from scenarios/bigtree.py (viz builds no cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ORIGIN = "http://radixlens.test"
PAGE = """<!doctype html><html><body style="margin:0;font-family:sans-serif">
<div id="root" style="width:1400px"></div>
<script type="module">
import mount from "./tree_view.js";
const root = document.getElementById("root");
const frame = () => new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 0)));
window.rlStep = (data, waitSettle) => new Promise((resolve) => {
  const t0 = performance.now();
  const host = () => root.querySelector(".radixlens-tree") || {dataset: {}};
  const r0 = Number(host().dataset.renders || 0), s0 = Number(host().dataset.settled || 0);
  let frames = 0, drawn = null, done = false;
  const tick = () => { frames += 1; if (!done) requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  const poll = async () => {
    const h = host();
    if (drawn === null && Number(h.dataset.renders || 0) > r0) {
      await frame();
      drawn = performance.now() - t0;
    }
    if (drawn !== null && (!waitSettle || Number(h.dataset.settled || 0) > s0)) {
      done = true;
      resolve({drawn, settled: performance.now() - t0, frames, nodes: Number(h.dataset.nodes),
               error: h.dataset.error || null});
    } else setTimeout(poll, 2);
  };
  mount({data, parentElement: root, setTriggerValue: (k, v) => { window.rlClicked = v; }});
  poll();
});
window.rlReady = true;
</script></body></html>"""


def open_bundle(page: Any, bundle: Path, timeout_ms: int = 30_000) -> None:
    """Loads `bundle` as the page's component; waits (up to `timeout_ms`) until `window.rlStep`
    exists."""
    js = Path(bundle).read_bytes()

    def serve(route: Any) -> None:
        if route.request.url.endswith("/tree_view.js"):
            route.fulfill(body=js, content_type="text/javascript")
        else:
            route.fulfill(body=PAGE, content_type="text/html")

    page.route(f"{ORIGIN}/**", serve)
    page.goto(f"{ORIGIN}/index.html")
    page.wait_for_function("() => window.rlReady === true", timeout=timeout_ms)


def draw_step(page: Any, data: dict, *, wait_settle: bool = True) -> dict[str, Any]:
    """Sends `data` to the mounted view; the browser's timings in ms (see the module doc)."""
    out = page.evaluate("([d, w]) => window.rlStep(d, w)", [data, wait_settle])
    if not wait_settle:
        out["settled"] = out["drawn"] + data.get("duration_ms", 0)
    return out
