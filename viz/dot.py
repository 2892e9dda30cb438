"""The tree as Graphviz DOT and SVG, for the downloads: the same boxes and edges as the view.

Built with the `graphviz` Python package from viz/scene.py's `tree_items`, so the file shows what
the page shows (labels, colours, dashed evictable leaves, folds); `dot_to_svg` runs Graphviz's
`dot` (installed by scripts/setup.sh) through the package. The page never parses DOT back: it
draws viz/scene.py's scene. Leaves out: the animation (see viz/export.py).
"""

from __future__ import annotations

from typing import Any

import graphviz

from radix.tree.snapshot import TreeSnapshot
from viz.scene import tree_items


def tree_dot(snapshot: TreeSnapshot, *, rankdir: str = "TB", **items: Any) -> str:
    """DOT source of `tree_items(snapshot, **items)`.

    A root with one 3-token child: nodes "n0" (root) and "n1" ("#1  r=0", dashed), an edge
    "n0" -> "n1" with id e1 and label "3 tok" newline "[1 2 3]".
    """
    if rankdir not in ("TB", "LR"):
        raise ValueError(f"rankdir must be 'TB' or 'LR', got {rankdir!r}")
    boxes, lines = tree_items(snapshot, **items)
    g = graphviz.Digraph("radix", graph_attr={"rankdir": rankdir, "nodesep": "0.25",
                                              "ranksep": "0.35", "bgcolor": "transparent"},
                         node_attr={"shape": "box", "fontname": "DejaVu Sans", "fontsize": "11",
                                    "height": "0.3", "margin": "0.08,0.03"},
                         edge_attr={"fontname": "DejaVu Sans", "fontsize": "9",
                                    "arrowsize": "0.6"})
    for b in boxes:
        style = "filled,rounded" + (",dashed" if b.dashed else "")
        g.node(b.id, label=_text(b.label), id=b.id, style=style, fillcolor=b.fill, color=b.stroke,
               penwidth=f"{b.stroke_width:g}", tooltip=b.tooltip)
    for ln in lines:
        g.edge(ln.source, ln.target, label=_text(ln.label), id=ln.id, color=ln.stroke,
               penwidth=f"{ln.stroke_width:g}")
    return g.source


def _text(label: str) -> str:
    """A label for DOT: backslashes kept literal, newlines as DOT's centred line break."""
    return label.replace("\\", "\\\\").replace("\n", "\\n")


def dot_to_svg(dot: str) -> str:
    """Lays out DOT with Graphviz's `dot`; RuntimeError (one line) if it is missing or fails."""
    try:
        return graphviz.Source(dot).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        raise RuntimeError("Graphviz `dot` is not installed (apt-get install graphviz)") from None
    except (graphviz.CalledProcessError, OSError) as exc:
        raise RuntimeError(f"dot failed: {str(exc).strip()[:300]}") from None
