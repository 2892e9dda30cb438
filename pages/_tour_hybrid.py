"""The Tour's hybrid walks: scenarios/hybrid_tour.py's four requests on Llama-3-8B and on a
hybrid (Qwen3.5-4B, `?walk=hybrid`; gpt-oss-20b, `?walk=hybrid-swa`), one scheduler phase a
frame: SGLang's component trees side by side (each node's FULL lock, SWA window or tombstone,
Mamba state or tombstone; the request's path in blue up to the hit, red where full attention
alone matched), the frame in words, and vLLM's lookup per KV-cache group under each tree with
the intersection's cut. Not a page: tour.py calls `show(hybrid)` for a walk of
scenarios.hybrid_tour.TOUR_WALKS.
"""

from __future__ import annotations

import streamlit as st

import scenarios.hybrid_tour as hy
from pages._player import Player, export_panel
from pages._shell import (
    ALERT_LINE_CHARS,
    ALERT_LINE_PX,
    max_scale,
    min_font_px,
    presenter,
    presenter_fit,
    say,
)
from viz.component import tree_view
from viz.group_grid import grid_px, group_grid_chart, group_rows
from viz.hybrid import component_scene, frame_highlight
from viz.hybrid_words import frame_lines, model_label, vllm_line

ABOUT = ("The same four requests on a full-attention model and on a hybrid, in SGLang 0.5.23's "
         "component tree (FULL with Mamba or SWA) and vLLM 0.33's KV-cache groups, one "
         "scheduler phase a frame. Blue: the request's path up to the hit every component "
         "accepts; red: what full attention alone matched past it (cut); green: a state or "
         "window stored; grey: a tombstone made.")


@st.cache_resource(max_entries=2, show_spinner="playing the walk through both models' caches…")
def _walk(hybrid: str) -> hy.HybridWalk:
    return hy.run_walk(hybrid)


def show(hybrid: str) -> None:
    walk = _walk(hybrid)
    player = Player(f"tour.hybrid.{hybrid}", len(walk.frames), page="tour")
    player.buttons()

    def _show(i: int, duration_ms: int) -> None:
        f = walk.frames[i]
        if not presenter():
            what = "the empty caches" if f.request < 0 else f"{walk.rids[f.request]}: {f.phase}"
            st.markdown(f"**Frame {i} / {len(walk.frames) - 1}: {what}**")
        words = frame_lines(walk, i)
        say("info", "\n\n".join(words))
        px = _tree_px(words)
        prompt = walk.prompts[f.request] if f.request >= 0 else None
        for k, (col, info, side) in enumerate(zip(st.columns(2), walk.models, f.sides)):
            with col:
                say("markdown", model_label(info.preset), bold="SGLang,")
                scene = component_scene(side.nodes, info.components,
                                        frame_highlight(side.nodes, side.events, prompt),
                                        presenter_fit(0.5, px))
                tree_view(scene, key=f"tour.hybrid.tree{k}", height=px, duration_ms=duration_ms,
                          max_scale=max_scale(), min_font_px=min_font_px())
                if side.lookup is not None:
                    _groups(k, info, side.lookup)
        _hits_table(walk, f.request + 1)

    player.frames(_show)
    with export_panel("export frames for slides (animated HTML)", "tour_hybrid") as open_:
        if open_:
            player.export(f"hybrid-{hybrid}", lambda i: _export_frame(walk, i))


def _tree_px(words: list[str]) -> int:
    """The trees' height: 280 px; in presenter mode 250 less an alert line for each line of
    the words past three (a paragraph break counting as one), so that vLLM's groups under the
    trees stay above the fold at 1280x800 (tests/browser/test_presenter.py)."""
    if not presenter():
        return 280
    lines = sum(-(-len(w) // ALERT_LINE_CHARS) for w in words) + len(words) - 1
    return 250 - ALERT_LINE_PX * max(0, lines - 3)


def _groups(k: int, info: hy.ModelInfo, lookup) -> None:
    """vLLM's lookup of the frame's request on this model, group by group, and its words."""
    px = int(min_font_px()) or 12
    rows = group_rows(info.kinds, info.block_size, info.vllm_window, lookup)
    title = f"vLLM: {lookup.rid}'s lookup by group (block {info.block_size:,})"
    st.echarts_chart(group_grid_chart(rows, info.block_size, lookup.hit_tokens, title, px),
                     key=f"tour.hybrid.groups{k}", height=grid_px(rows, px), renderer="svg")
    if not presenter():
        say("caption", vllm_line(info, lookup))


def _hits_table(walk: hy.HybridWalk, done: int) -> None:
    """Each request's hit so far, per model and engine."""
    if done <= 0:
        return
    table = {"request": list(walk.rids[:done])}
    for info, hits, vllm in zip(walk.models, walk.hits, walk.vllm_hits):
        name = model_label(info.preset)
        table[f"{name}, SGLang"] = [f"{h:,}" for h in hits[:done]]
        table[f"{name}, vLLM"] = [f"{h:,}" for h in vllm[:done]]
    st.dataframe(table, hide_index=True)


def _export_frame(walk: hy.HybridWalk, i: int) -> tuple[dict, str]:
    """The hybrid model's tree and the frame's words, for the slides."""
    f = walk.frames[i]
    info, side = walk.models[1], f.sides[1]
    prompt = walk.prompts[f.request] if f.request >= 0 else None
    scene = component_scene(side.nodes, info.components,
                            frame_highlight(side.nodes, side.events, prompt))
    return scene, " ".join(frame_lines(walk, i))
