"""The why panels' pictures: where prompt B leaves prompt A, drawn on the tree and the block grid.

Reads what scenarios/whypair.py computed (a tree snapshot whose nodes carry roles and names, a
block-pool snapshot with B's block table and the block to mark); builds no cache. The tree is
viz/scene.py's (drawn by the component every tree view uses): A's path and B's path keep their
roles' pens, and the node at whose end B leaves A gets the mark, an orange box with the line
"◆ B leaves A here: token N". The grid is viz/blocks.py's: B's chain outlined, the marked block
a star with an arrow and its label, the sentence of cause as the title.
Leaves out: folding (a pair's tree has at most four nodes per namespace).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Mapping
from typing import Any

import plotly.graph_objects as go

from viz.blocks import LEGEND_PX, block_grid_figure, drawn_blocks
from viz.escape import esc_html
from viz.scene import Decode, place, tree_items

PARTING_ROLE = "parting"  # the role of the marked node (the browser's data-role)
PARTING_STROKE, PARTING_FILL = "#ff7f0e", "#ffe3c4"  # orange: where the paths part
MARK = "◆"
MARK_TRACE = "where B leaves A's chain"  # the grid's legend entry for the marked block
TITLE_CHARS = 110  # the title's sentence wraps at this many characters a line


def parting_scene(snapshot: Any, highlight: Mapping[int, str], names: Mapping[int, str],
                  parting_node: int, parting_label: str, *, decode: Decode | None = None,
                  rankdir: str = "LR") -> dict[str, Any]:
    """The pair's tree (viz/scene.py's items, laid out) with node `parting_node` marked: an
    orange box, role "parting", its label ending in "◆ <parting_label>".

    A = 1 2 3, B = 1 2 9 (node 2 holds [1 2], node 1 [3], node 3 [9]): box n2 reads
    "#2  r=0" / "shared: 2 tokens" / "◆ B leaves A here: token 2"; edges e1 and e3 keep A's
    and B's pens.
    """
    boxes, lines = tree_items(snapshot, decode=decode, highlight=highlight, names=names)
    box_id = f"n{parting_node}"
    if not any(b.id == box_id for b in boxes):
        raise ValueError(f"parting node {parting_node} is not in the snapshot")
    boxes = [b._replace(label=f"{b.label}\n{MARK} {parting_label}", fill=PARTING_FILL,
                        stroke=PARTING_STROKE, stroke_width=3.5, role=PARTING_ROLE,
                        tooltip=f"{b.tooltip}; {parting_label}") if b.id == box_id else b
             for b in boxes]
    return place(boxes, lines, rankdir)


def grid_columns(snap: Any) -> int:
    """16 cells a row for a small pool (up to 256 drawn blocks), 32 past that."""
    return 16 if len(drawn_blocks(snap)) <= 256 else 32


def marked_grid_figure(snap: Any, chain_ids: Collection[int], mark_block_id: int | None,
                       mark_label: str, sentence: str, labels: Mapping[int, str] | None = None,
                       columns: int | None = None) -> go.Figure:
    """viz/blocks.py's grid of `snap` with B's chain (`chain_ids`) outlined, block
    `mark_block_id` starred with an arrow and `mark_label`, and `sentence` (the cause) as the
    title, wrapped. A block past the drawn ones gets no star (the title still says it).

    B's table [1, 2, 4, 5] marked at #4, 16 a row: #4 is drawn cell 3, so the star sits at
    x = 3 % 16 = 3, y = 3 // 16 = 0.
    """
    columns = columns or grid_columns(snap)
    fig = block_grid_figure(snap, columns=columns, chain_ids=chain_ids, labels=labels)
    index = {b.id: i for i, b in enumerate(drawn_blocks(snap))}
    if mark_block_id in index:
        x, y = index[mark_block_id] % columns, index[mark_block_id] // columns
        fig.add_trace(go.Scatter(
            x=[x], y=[y], mode="markers", name=MARK_TRACE, hoverinfo="skip",
            marker={"symbol": "star", "size": 16, "color": "#ffd400",
                    "line": {"width": 1.5, "color": "#000000"}}))
        fig.add_annotation(
            x=x, y=y, text=esc_html(f"{MARK} {mark_label}"), showarrow=True, arrowhead=2,
            ax=0, ay=28 if y == 0 else -28, xanchor="left" if x < columns / 2 else "right",
            font={"size": LEGEND_PX}, bgcolor="#fff7e0", bordercolor=PARTING_STROKE)
    title = textwrap.wrap(sentence, TITLE_CHARS) or [""]
    fig.update_layout(title={"text": "<br>".join(esc_html(t) for t in title),
                             "font": {"size": LEGEND_PX}},
                      margin={"t": 20 + 18 * len(title)},
                      height=fig.layout.height + 18 * (len(title) - 1))
    return fig
