"""The animated tree view: a Streamlit v2 custom component (st.components.v2) over plain SVG.

Python builds the scene from a snapshot and lays it out (viz/scene.py, viz/layout.py: a tidy
layered tree, O(n), no Graphviz run per step) as named fields; the committed bundle
`dist/tree_view.js` (built from `frontend/` with `npm run build`; no npm step at app start) draws
it and transitions from the previous scene by element id, so a split or an eviction animates in
place and unchanged nodes stay put. A click on a node comes back as the node id. This is the only
module in viz/ that imports streamlit.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

BUNDLE = Path(__file__).parent / "dist" / "tree_view.js"
CSS = """
.radixlens-tree { width: 100%; overflow: hidden; }
.radixlens-tree g.node { cursor: pointer; }
"""


@cache
def _component() -> Any:
    import streamlit as st

    if not BUNDLE.is_file():
        raise FileNotFoundError(f"{BUNDLE} is missing: `npm run build` in viz/component/frontend")
    return st.components.v2.component(
        "radixlens.tree_view", js=BUNDLE.read_text(encoding="utf-8"), css=CSS,
        # subtle: not in a shadow root: d3-transition schedules on the document's timer and the
        # browser tests read the drawn SVG from the page
        isolate_styles=False,
    )


def view_data(scene: dict[str, Any], height: int = 420, duration_ms: int = 400,
              max_scale: float = 1.5, min_font_px: float = 0.0) -> dict[str, Any]:
    """The component's data for a laid-out scene: the scene, its signature (the browser skips a
    rerun that sends the same tree), the height, the transition time, how far a small tree
    may be scaled up (presenter mode: more) and the smallest label size on screen (presenter
    mode: 14 px; a bigger tree is then shown around its highlighted nodes, else its newest;
    0: fit it all)."""
    view = [scene, int(height), float(max_scale), float(min_font_px)]  # a new fit redraws too
    sig = hashlib.blake2b(json.dumps(view, sort_keys=True).encode(), digest_size=8).hexdigest()
    return {"scene": scene, "sig": sig, "height": int(height), "duration_ms": int(duration_ms),
            "max_scale": float(max_scale), "min_font_px": float(min_font_px)}


def tree_view(scene: dict[str, Any], *, key: str, height: int = 420, duration_ms: int = 400,
              max_scale: float = 1.5, min_font_px: float = 0.0) -> int | None:
    """Draws `scene` (animated from this key's previous one); returns the clicked node id, if any.

    The click is a trigger value: it is the node id on the rerun right after the click and None
    afterwards, so the page keeps the selection in its own session key.
    """
    mount = _component()
    result = mount(
        key=key,
        data=view_data(scene, height, duration_ms, max_scale, min_font_px),
        height=int(height),
        on_clicked_change=lambda: None,
    )
    clicked = getattr(result, "clicked", None)
    return int(clicked) if clicked is not None else None
