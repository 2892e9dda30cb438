"""The Trace debugger's "Why did this request miss?" panel: two requests compared.

Not a page (app.py does not list it): pages/_trace_view.py calls `show_why` with the
replay. Pick A (cached first) and B; the panel shows radix/why's report (where the token
streams part, what each cache reuses, the cause), the pair's tree with the node where B leaves
A's path marked, and the block grid of a pool that ran A then B with the first block whose hash
differs marked (viz/why.py). A Mooncake trace is compared block by block by its hash ids
(scenarios/whyhash.py: the first id that differs, what each cache reuses). `show_causes`
lists, for the explainer panel, the causes found for the requests that lost most, each with a
button to pick it here.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._shell import max_scale, min_font_px, tree_height
from scenarios.why import causes, compare
from scenarios.whyhash import compare_hash_ids
from viz.component import tree_view
from viz.why import marked_grid_chart, marked_grid_height, parting_scene


def _pick(rid: str, partner: str) -> None:
    st.session_state["trace.why_a"], st.session_state["trace.why_b"] = partner, rid
    st.session_state["trace.why"] = True  # open the comparison panel


def draw_pair(view: Any, key: str) -> None:
    """The tree that cached A then B (blue: both paths; black: A only; green: B only; orange
    ◆: where B leaves A), the pool that ran them (B's blocks outlined, ★ the first whose hash
    differs, the cause as the title), the sentences, and B's blocks around that one."""
    # presenter mode: labels >= 14 px (at the plain 1.5 x scale they were 13.5, #24 item 4);
    # a pair's tree (a few nodes, LR) fits the page's width at 14 px
    tree_view(parting_scene(view.tree, view.highlight, view.names, view.parting_node,
                            view.parting_label), key=key, height=tree_height(200),
              duration_ms=0, max_scale=max_scale(), min_font_px=min_font_px())
    st.markdown(f"**Tree.** {view.tree_sentence}. ◆ marks the node where B leaves A.")
    g = view.grid
    # keyed ECharts, as every page's grid: another pick redraws it in place (a plotly figure
    # was a new element, blank for a frame, #24)
    grid = marked_grid_chart(g.snapshot, g.b_block_ids, g.mark_block_id, g.mark_label,
                             view.block_sentence, g.labels)
    st.echarts_chart(grid, key=f"{key}_blocks", height=marked_grid_height(grid), renderer="svg")
    st.markdown(f"**Block grid.** {view.block_sentence}.")
    rows = view.block_rows
    lo = max(0, (view.first_bad_block or len(rows)) - 3)
    st.dataframe(rows[lo:lo + 8], hide_index=True)


def _show_hash_ids(r: Any, a: str, b: str) -> None:
    """Two Mooncake requests block by block: the first hash id that differs (scenarios/whyhash)."""
    v = compare_hash_ids(r.trace, a, b, r.block_size)
    st.markdown(f"**Hash ids.** {v.sentence}.")
    lo = max(0, (len(v.rows) if v.first is None else v.first) - 3)
    st.dataframe(v.rows[lo:lo + 8], hide_index=True)


def show_why(r: Any) -> None:
    rids = [tr.rid for tr in r.trace.requests]
    if len(rids) < 2 or r.trace.format not in ("request", "mooncake"):
        return
    with st.expander("Why did this request miss? Compare two requests", key="trace.why",
                     on_change="rerun"):
        if not st.session_state.get("trace.why"):
            return
        c = st.columns(2)
        st.session_state.setdefault("trace.why_a", rids[0])
        st.session_state.setdefault("trace.why_b", rids[1])
        a = c[0].selectbox("A: cached first", rids, key="trace.why_a")
        b = c[1].selectbox("B: the request that missed", rids, key="trace.why_b")
        if a == b:
            st.info("Pick two different requests.")
            return
        if r.trace.format == "mooncake":  # hash ids, no tokens: block rows in 512-token units
            _show_hash_ids(r, a, b)
            return
        view = compare(r.trace, a, b, r.page_size, r.block_size)
        st.code(view.text, language=None)
        draw_pair(view, "trace.why_tree")


def show_causes(r: Any, rids: list[str]) -> None:
    """The causes found for `rids` (each against its best earlier partner)."""
    if r.trace.format != "request":
        return
    found = causes(r.trace, rids, r.block_size)
    known = [f for f in found if f.kinds]
    st.markdown(f"**Causes found** ({len(known)} of {len(found)} requests compared with the "
                "earlier request sharing their longest prefix)")
    for f in known:
        c = st.columns([5, 1])
        c[0].markdown(f"`{f.rid}` after `{f.partner}` ({f.shared:,} shared tokens): "
                      f"{f.sentence}")
        c[1].button("compare", key=f"trace.why_open.{f.rid}", on_click=_pick,
                    args=(f.rid, f.partner))
