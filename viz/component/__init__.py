"""The animated tree view: a Streamlit v2 custom component (st.components.v2) over d3-graphviz.

Python makes the DOT (`viz/dot.py`); the committed bundle `dist/tree_view.js` (built from
`frontend/` with `npm run build`; no npm step at app start) renders it and transitions from the
previous DOT by element id, so a split or an eviction animates in place. A click on a node comes
back as the node id. This is the only module in viz/ that imports streamlit.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

BUNDLE = Path(__file__).parent / "dist" / "tree_view.js"
CSS = """
.radixlens-tree { width: 100%; overflow: hidden; }
.radixlens-tree svg { width: 100%; height: 100%; }
.radixlens-tree g.node { cursor: pointer; }
"""


@cache
def _component() -> Any:
    import streamlit as st

    if not BUNDLE.is_file():
        raise FileNotFoundError(f"{BUNDLE} is missing: `npm run build` in viz/component/frontend")
    return st.components.v2.component(
        "radixlens.tree_view", js=BUNDLE.read_text(encoding="utf-8"), css=CSS,
        # subtle: not in a shadow root: d3-graphviz finds its transition from the document root
        isolate_styles=False,
    )


def tree_view(dot: str, *, key: str, height: int = 420, duration_ms: int = 400) -> int | None:
    """Draws `dot` (animated from this key's previous DOT); returns the clicked node id, if any.

    The click is a trigger value: it is the node id on the rerun right after the click and None
    afterwards, so the page keeps the selection in its own session key.
    """
    mount = _component()
    result = mount(
        key=key,
        data={"dot": dot, "height": int(height), "duration_ms": int(duration_ms)},
        height=int(height),
        on_clicked_change=lambda: None,
    )
    clicked = getattr(result, "clicked", None)
    return int(clicked) if clicked is not None else None
