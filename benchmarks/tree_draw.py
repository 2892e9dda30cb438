"""Time the tree view on a 1,000-node tree, one split a step, in Debian's Chromium (Playwright).

The component's built bundle is loaded into a bare local page (viz/component/harness.py, no
Streamlit); per step: `python` = the scene straight from the snapshot (viz/scene.py, laid out
there too) + what the wrapper does before sending, `drawn` = data in -> first frame
painted, `settled` = -> transition ended, `total` = python + settled, frames painted during the
step. `--legacy BUNDLE` times the old d3-graphviz bundle (it takes DOT, from viz/dot.py, and lays
it out in WASM; its `settled` is drawn + duration, as it marks no end). Target (issue 6): total
under 500 ms. Prints JSON, then medians.
Usage: python benchmarks/tree_draw.py [--nodes 1000] [--steps 10] [--duration-ms 250]
       [--legacy OLD_BUNDLE.js]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from scenarios.bigtree import split_workload  # noqa: E402
from viz.component import BUNDLE, view_data  # noqa: E402
from viz.component.harness import draw_step, open_bundle  # noqa: E402
from viz.dot import tree_dot  # noqa: E402
from viz.scene import tree_scene  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def run(bundle: Path, snaps: list, duration_ms: int, legacy: bool) -> dict:
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_bundle(page, bundle)
        for snap in snaps:
            started = time.perf_counter()
            data = ({"dot": tree_dot(snap), "height": 600, "duration_ms": duration_ms} if legacy
                    else view_data(tree_scene(snap), 600, duration_ms))
            python_ms = (time.perf_counter() - started) * 1000
            out = draw_step(page, data, wait_settle=not legacy)
            rows.append({"nodes": len(snap.nodes), "drawn_nodes": out["nodes"],
                         "python_ms": round(python_ms, 1), "drawn_ms": round(out["drawn"], 1),
                         "settled_ms": round(out["settled"], 1), "frames": out["frames"],
                         "total_ms": round(python_ms + out["settled"], 1),
                         "error": out["error"]})
        browser.close()
    steps = rows[1:]  # rows[0]: the first draw of the whole tree
    med = {k: statistics.median(r[k] for r in steps)
           for k in ("python_ms", "drawn_ms", "settled_ms", "total_ms", "frames")}
    return {"bundle": str(bundle), "legacy": legacy, "duration_ms": duration_ms,
            "first_draw": rows[0], "median": med, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--duration-ms", type=int, default=250)
    ap.add_argument("--legacy", type=Path, help="the old d3-graphviz bundle, to compare")
    args = ap.parse_args()
    snaps = split_workload(args.nodes, args.steps)
    results = [run(BUNDLE, snaps, args.duration_ms, legacy=False)]
    if args.legacy:
        results.append(run(args.legacy, snaps, args.duration_ms, legacy=True))
    print(json.dumps(results, indent=1))
    print(f"\n{args.steps} steps on {len(snaps[0].nodes):,} nodes, one split each, "
          f"transition {args.duration_ms} ms; medians in ms")
    print(f"{'bundle':<14}{'first draw':>11}{'python':>8}{'drawn':>8}{'settled':>9}"
          f"{'total':>8}{'frames':>8}")
    for r in results:
        m = r["median"]
        print(f"{'d3-graphviz' if r['legacy'] else 'svg+layout':<14}"
              f"{r['first_draw']['total_ms']:>11.0f}{m['python_ms']:>8.0f}{m['drawn_ms']:>8.0f}"
              f"{m['settled_ms']:>9.0f}{m['total_ms']:>8.0f}{m['frames']:>8.0f}")


if __name__ == "__main__":
    main()
