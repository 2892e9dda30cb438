"""The animated tree view: a Streamlit v2 custom component (st.components.v2) over plain SVG.

Python makes the DOT (`viz/dot.py`) and lays it out (`viz/layout.py`: a tidy layered tree, O(n),
no Graphviz run per step); the committed bundle `dist/tree_view.js` (built from `frontend/` with
`npm run build`; no npm step at app start) draws the scene and transitions from the previous one
by element id, so a split or an eviction animates in place and unchanged nodes stay put. A click
on a node comes back as the node id. This is the only module in viz/ that imports streamlit.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from viz.layout import tree_scene

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


def view_data(dot: str, height: int = 420, duration_ms: int = 400) -> dict[str, Any]:
    """The component's data for `dot`: the laid-out scene, a signature of the DOT (the browser
    skips a rerun that sends the same tree), the height and the transition time."""
    return {
        "scene": tree_scene(dot),
        "sig": hashlib.blake2b(dot.encode(), digest_size=8).hexdigest(),
        "height": int(height),
        "duration_ms": int(duration_ms),
    }


def tree_view(dot: str, *, key: str, height: int = 420, duration_ms: int = 400) -> int | None:
    """Draws `dot` (animated from this key's previous tree); returns the clicked node id, if any.

    The click is a trigger value: it is the node id on the rerun right after the click and None
    afterwards, so the page keeps the selection in its own session key.
    """
    mount = _component()
    result = mount(
        key=key,
        data=view_data(dot, height, duration_ms),
        height=int(height),
        on_clicked_change=lambda: None,
    )
    clicked = getattr(result, "clicked", None)
    return int(clicked) if clicked is not None else None
