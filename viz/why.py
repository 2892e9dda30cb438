"""The why panels' pictures: where prompt B leaves prompt A, drawn on the tree and the block grid.

Reads what scenarios/whypair.py computed (a tree snapshot whose nodes carry roles and names, a
block-pool snapshot with B's block table and the block to mark); builds no cache. The tree is
viz/scene.py's (drawn by the component every tree view uses): A's path and B's path keep their
roles' pens, and the node at whose end B leaves A gets the mark, an orange box with the line
"◆ B leaves A here: token N". The grid is viz/grid_chart.py's keyed ECharts grid (as every
page's, so a new pick changes it in place): B's chain outlined, the marked block a star with its
label, the sentence of cause as the title.
Leaves out: folding (a pair's tree has at most four nodes per namespace); plotly's arrow from
the label to the star (the label sits beside it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Mapping
from typing import Any

from viz.blocks import LEGEND_PX, drawn_blocks
from viz.grid_chart import block_grid_chart, grid_height
from viz.layout import place
from viz.scene import Decode, tree_items

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


STAR = ("path://M50 0L61 35L98 35L68 57L79 91L50 70L21 91L32 57L2 35L39 35Z")  # 5 points
TITLE_LINE_PX = 18  # one more line of the wrapped title


def marked_grid_chart(snap: Any, chain_ids: Collection[int], mark_block_id: int | None,
                      mark_label: str, sentence: str, labels: Mapping[int, str] | None = None,
                      columns: int | None = None) -> dict[str, Any]:
    """viz/grid_chart.py's keyed ECharts grid of `snap` (the same cells, colours and hovers as
    every page's block grid) with B's chain (`chain_ids`) outlined, block `mark_block_id`
    starred and labelled "◆ `mark_label`" (beside the star, towards the grid's middle; under it
    on the first row), and `sentence` (the cause) as the title, wrapped at TITLE_CHARS. A
    block past the drawn ones gets no star (the title still says it). Height:
    `marked_grid_height`.

    B's table [1, 2, 4, 5] marked at #4, 16 a row: #4 is drawn cell 3, so the star sits at
    column 3 % 16 = 3, row 3 // 16 = 0.
    """
    columns = columns or grid_columns(snap)
    option = block_grid_chart(snap, columns=columns, chain_ids=chain_ids, labels=labels)
    index = {b.id: i for i, b in enumerate(drawn_blocks(snap))}
    if mark_block_id in index:
        x, y = index[mark_block_id] % columns, index[mark_block_id] // columns
        label = {"show": True, "formatter": f"{MARK} {mark_label}",
                 "position": "bottom" if y == 0 else "top",
                 "align": "left" if x < columns / 2 else "right", "fontSize": LEGEND_PX,
                 "color": "#000000", "backgroundColor": "#fff7e0",
                 "borderColor": PARTING_STROKE, "borderWidth": 1, "padding": [2, 4]}
        option["series"].append({
            "type": "scatter", "name": MARK_TRACE, "symbol": STAR, "symbolSize": 16,
            "silent": True, "tooltip": {"show": False}, "z": 5, "label": label,
            "itemStyle": {"color": "#ffd400", "borderColor": "#000000", "borderWidth": 1.5,
                          "opacity": 1},
            "data": [[x, y]]})
        option["legend"]["data"].append(MARK_TRACE)
    title = textwrap.wrap(sentence, TITLE_CHARS) or [""]
    option["title"]["text"] = "\n".join(title)  # plain text: ECharts escapes it
    option["title"]["textStyle"]["lineHeight"] = TITLE_LINE_PX
    option["grid"] = {**option["grid"], "top": 20 + TITLE_LINE_PX * len(title)}
    return option


def marked_grid_height(option: dict[str, Any]) -> int:
    """The marked grid's height in px: the grid's (viz/grid_chart.py grid_height) and one
    title line more for each line past the first (a 2-row grid, 2 title lines: 200 + 18)."""
    lines = option["title"]["text"].count("\n") + 1
    return grid_height(option) + TITLE_LINE_PX * (lines - 1)
