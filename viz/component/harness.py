"""The tree view's bundle in a bare page, for the benchmark and the browser tests (no Streamlit).

`open_bundle(page, bundle)` serves the built JS to a Playwright page under a fake origin and
mounts it the way Streamlit does (`default({data, parentElement, setTriggerValue})`);
`draw_step(page, data)` sends one data dict and times it in the browser: `drawn` (data in ->
first frame painted), `settled` (-> the transition ended; for the old d3-graphviz bundle, which
has no end mark, drawn + its duration) and the frames painted meanwhile. `split_workload` makes
the trees: about `num_nodes` nodes, then one split (and its new leaf) per step.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from radix.tree.radix_cache import RadixCache

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


def open_bundle(page: Any, bundle: Path) -> None:
    """Loads `bundle` as the page's component; waits until `window.rlStep` exists."""
    js = Path(bundle).read_bytes()

    def serve(route: Any) -> None:
        if route.request.url.endswith("/tree_view.js"):
            route.fulfill(body=js, content_type="text/javascript")
        else:
            route.fulfill(body=PAGE, content_type="text/html")

    page.route(f"{ORIGIN}/**", serve)
    page.goto(f"{ORIGIN}/index.html")
    page.wait_for_function("() => window.rlReady === true", timeout=30_000)


def draw_step(page: Any, data: dict, *, wait_settle: bool = True) -> dict[str, Any]:
    """Sends `data` to the mounted view; the browser's timings in ms (see the module doc)."""
    out = page.evaluate("([d, w]) => window.rlStep(d, w)", [data, wait_settle])
    if not wait_settle:
        out["settled"] = out["drawn"] + data.get("duration_ms", 0)
    return out


def split_workload(num_nodes: int = 1_000, num_steps: int = 10, seed: int = 0) -> list:
    """Snapshots: a tree of >= `num_nodes` nodes, then `num_steps` more, each after one insert
    that leaves an existing edge midway (the edge's node splits in two and a new leaf grows):
    two nodes more per step."""
    rng = random.Random(seed)
    cache = RadixCache()
    seqs: list[list[int]] = []
    while len(cache.snapshot().nodes) < num_nodes:
        if seqs and rng.random() < 0.9:
            base = rng.choice(seqs)
            cut = rng.randrange(1, len(base))
            seq = base[:cut] + [rng.randrange(1000, 2000) for _ in range(rng.randrange(1, 30))]
        else:
            seq = [rng.randrange(1000) for _ in range(rng.randrange(5, 60))]
        cache.insert(seq)
        seqs.append(seq)
    snaps = [cache.snapshot()]
    fresh = 10_000
    for _ in range(num_steps):
        node = rng.choice([n for n in snaps[-1].nodes if len(n.token_ids) >= 2])
        path = _path_tokens(snaps[-1], node.id)
        cut = len(path) - len(node.token_ids) + len(node.token_ids) // 2
        cache.insert(path[:cut] + [fresh])
        fresh += 1
        snaps.append(cache.snapshot())
    return snaps


def _path_tokens(snap: Any, node_id: int) -> list[int]:
    by_id = snap.by_id()
    out: list[int] = []
    node = by_id[node_id]
    while node.parent is not None:
        out[:0] = node.token_ids
        node = by_id[node.parent]
    return out
