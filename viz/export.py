"""A range of frames as one self-contained, animated HTML file, for slides.

The file inlines the tree view's own bundle (viz/component/dist/tree_view.js, its ES module
export turned into a global), the laid-out scenes and their captions, and a small player: it
plays on open (each frame animates from the last, as on the page), with pause, back, next and a
scrubber. No network: everything is in the file, so it opens from a USB stick on a lecture-hall
PC. A page may add one plotly figure per frame (the Trace debugger's block view): plotly.js is
then inlined as well.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

BUNDLE = Path(__file__).parent / "component" / "dist" / "tree_view.js"
_EXPORT = re.compile(r"export\s*\{\s*([\w$]+)\s+as\s+default\s*\}\s*;?\s*$")

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: "DejaVu Sans", sans-serif; margin: 16px; color: #222; }}
#caption {{ font-size: 20px; min-height: 3em; margin: 8px 0; }}
#bar {{ display: flex; gap: 8px; align-items: center; font-size: 16px; }}
#bar input[type=range] {{ flex: 1; }}
button {{ font-size: 16px; padding: 4px 12px; }}
</style></head><body>
<h2>{title}</h2>{note}
<div id="bar"><button id="back">&#9664; back</button><button id="play">pause</button>
<button id="next">next &#9654;</button><input id="scrub" type="range" min="0" value="0">
<span id="where"></span></div>
<div id="caption"></div>
<div id="root" style="width: 100%"></div>
<div id="blocks" style="width: 100%"></div>
<script>{bundle}</script>
{plotly}
<script>
const FRAMES = {frames};
const CAPTIONS = {captions};
const FIGURES = {figures};
const INTERVAL = {interval};
const root = document.getElementById("root"), scrub = document.getElementById("scrub");
let i = 0, playing = true, timer = null;
scrub.max = String(FRAMES.length - 1);
function show(k) {{
  i = Math.max(0, Math.min(FRAMES.length - 1, k));
  window.RadixLensTree({{data: FRAMES[i], parentElement: root, setTriggerValue: () => {{}}}});
  document.getElementById("caption").textContent = CAPTIONS[i];
  if (FIGURES) Plotly.react("blocks", FIGURES[i].data, FIGURES[i].layout,
                            {{displaylogo: false, responsive: true}});
  document.getElementById("where").textContent = `${{i + 1}} / ${{FRAMES.length}}`;
  scrub.value = String(i);
  document.body.dataset.frame = String(i);
}}
function tick() {{ if (i < FRAMES.length - 1) show(i + 1); else setPlaying(false); }}
function setPlaying(on) {{
  playing = on; document.getElementById("play").textContent = on ? "pause" : "play";
  clearInterval(timer); if (on) timer = setInterval(tick, INTERVAL);
}}
document.getElementById("play").onclick = () => {{
  if (!playing && i >= FRAMES.length - 1) show(0); setPlaying(!playing); }};
document.getElementById("back").onclick = () => {{ setPlaying(false); show(i - 1); }};
document.getElementById("next").onclick = () => {{ setPlaying(false); show(i + 1); }};
scrub.oninput = () => {{ setPlaying(false); show(Number(scrub.value)); }};
show(0); setPlaying(FRAMES.length > 1);
</script></body></html>
"""


def bundle_script(bundle: Path = BUNDLE) -> str:
    """The ES module bundle as a classic script defining `window.RadixLensTree`."""
    js = bundle.read_text(encoding="utf-8").rstrip()
    m = _EXPORT.search(js)
    if m is None:
        raise ValueError(f"{bundle}: no `export {{X as default}}` at its end")
    js = js[: m.start()] + f"window.RadixLensTree={m.group(1)};"
    return js.replace("</script", "<\\/script")


def _json(value: Any) -> str:
    """JSON safe inside a <script> element (no "</script>" can close it early)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e")


def export_html(scenes: list[dict[str, Any]], captions: list[str], title: str,
                interval_ms: int = 1_200, height: int = 520, duration_ms: int = 600,
                figures: list[Any] | None = None, note: str = "") -> str:
    """One HTML file that plays `scenes` (viz/scene.py scenes) with their captions, and with
    `figures` (one plotly figure per scene: the block view beside the tree) below the tree;
    plotly.js is then inlined too (about 4.6 MB), so the file still needs no network. `note`:
    a line under the title (the host tier walk's colour legend); none, the file is as before."""
    if not scenes or len(scenes) != len(captions):
        raise ValueError("export: one caption per scene, at least one scene")
    if figures is not None and len(figures) != len(scenes):
        raise ValueError("export: one figure per scene, or none")
    frames = [{"scene": s, "sig": str(k), "height": height, "duration_ms": duration_ms,
               "max_scale": 2.0} for k, s in enumerate(scenes)]
    plotly = ""
    if figures is not None:
        from plotly.offline import get_plotlyjs

        plotly = "<script>" + get_plotlyjs().replace("</script", "<\\/script") + "</script>"
        made: dict[int, Any] = {}  # frames that share a figure share its JSON
        for f in figures:
            if id(f) not in made:
                made[id(f)] = json.loads(f.to_json()) if hasattr(f, "to_json") else f
        figures = [made[id(f)] for f in figures]
    note = f'\n<p id="note">{html.escape(note)}</p>' if note else ""
    return PAGE.format(title=html.escape(title), note=note, bundle=bundle_script(), plotly=plotly,
                       frames=_json(frames), captions=_json(list(captions)),
                       figures=_json(figures), interval=int(interval_ms))
