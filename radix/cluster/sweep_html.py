"""The sweep's picture: hit rate and TTFT p99 against replicas, one line per router, as a
self-contained HTML page drawn by plotly.js.

radix/ stays free of plotting libraries: the figures are plain JSON (plotly's figure schema:
traces with x, y, name; a layout) and the page embeds the plotly.min.js file that the pinned
`plotly` package ships (read as a file, never imported), or loads it from the plotly CDN when
that package is absent. Leaves out: interactivity beyond plotly's own.
"""

from __future__ import annotations

import html
import importlib.util
import json
from pathlib import Path
from typing import Any

CDN = "https://cdn.plot.ly/plotly-2.35.2.min.js"
PANELS = (("hit_rate", "prompt-token hit rate (tree)", ".0%"),
          ("ttft_p99_s", "TTFT p99, s (derived, not measured)", ".3f"))


def figures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One figure per panel: a line per (router, and capacity / page / block size when the
    grid varies them), x = replicas."""
    varied = [k for k in ("capacity", "page_size", "block_size")
              if len({json.dumps(r[k]) for r in rows}) > 1]
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        label = r["router"] + "".join(f" {k}={r[k]}" for k in varied)
        lines.setdefault(label, []).append(r)
    out = []
    # a tick at every replica count swept (a log axis ticking powers of 2 had none at 3)
    ticks = sorted({r["replicas"] for r in rows})
    for key, title, fmt in PANELS:
        data = [{"type": "scatter", "mode": "lines+markers", "name": label,
                 "x": [p["replicas"] for p in pts], "y": [p["totals"][key] for p in pts]}
                for label, pts in lines.items()]
        layout = {"title": {"text": title}, "xaxis": {"title": {"text": "replicas"},
                                                      "type": "log", "tickvals": ticks},
                  "yaxis": {"tickformat": fmt}, "font": {"size": 14}, "height": 420}
        out.append({"data": data, "layout": layout})
    return out


def _script() -> str:
    spec = importlib.util.find_spec("plotly")
    if spec is not None and spec.origin is not None:
        js = Path(spec.origin).parent / "package_data" / "plotly.min.js"
        if js.exists():
            return f"<script>{js.read_text()}</script>"
    return f'<script src="{CDN}"></script>'


def sweep_html(rows: list[dict[str, Any]], title: str) -> str:
    figs = figures(rows)
    divs = "".join(f'<div id="fig{i}"></div>' for i in range(len(figs)))
    calls = "".join(f"Plotly.newPlot('fig{i}', {json.dumps(f['data'])}, "
                    f"{json.dumps(f['layout'])});" for i, f in enumerate(figs))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title>{_script()}</head><body><h2>{html.escape(title)}</h2>{divs}"
            f"<script>{calls}</script></body></html>")
