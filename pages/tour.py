"""Tour: a few requests through the radix tree and vLLM's blocks, one micro-event at a time."""

from __future__ import annotations

import streamlit as st

import scenarios.hosttier as ht
import scenarios.hybrid_tour as hy
from pages import _tour_hosttier, _tour_hybrid
from pages._player import Player, export_panel
from pages._shell import (
    below_alert_px,
    long_caption,
    max_scale,
    min_font_px,
    presenter,
    presenter_tree_px,
    say,
    tree_height,
)
from radix.runs.costs import LABEL
from scenarios.tour import (
    WALKS,
    block_counters,
    block_index,
    lookup_of,
    rid_at,
    run_tour,
    tour_numbers,
    tree_counters,
)
from viz.blocks import grid_caption, lookup_line, queue_line, request_chain
from viz.component import tree_view
from viz.flavor import flavor_line
from viz.grid_chart import block_grid_chart, grid_height
from viz.scene import fit_tree_scene, tree_scene
from viz.timeline import Timeline
from viz.words import build_owners, node_line


@st.cache_resource(max_entries=4, show_spinner="playing the walk through both caches…")
def _tour(name: str):
    run = run_tour(name)
    tl = Timeline(run.log)
    cursors = [(s, k) for s in range(tl.num_steps + 1) for k in range(tl.num_micro(s) + 1)]
    return run, tl, cursors, build_owners(run.log.steps)


TITLES = {**{w: walk.title for w, walk in WALKS.items()}, ht.TOUR_WALK: ht.TOUR_TITLE,
          **hy.TOUR_TITLES}
if "tour.walk" not in st.session_state:
    st.session_state["tour.walk"] = st.query_params.get("walk", "three-requests")
    if st.session_state["tour.walk"] not in TITLES:
        st.session_state["tour.walk"] = "three-requests"
name = st.session_state["tour.walk"]
head = st.columns([3, 2])
head[0].title(TITLES[name])
head[1].selectbox("walk", list(TITLES), key="tour.walk", label_visibility="collapsed",
                  format_func=lambda w: TITLES[w].removeprefix("Tour: "))
st.query_params["walk"] = name
if name == ht.TOUR_WALK:  # the host tier: its own cache and player (pages/_tour_hosttier.py)
    long_caption(ht.TOUR_ABOUT + " Blue: device only; green: device + host copy; orange: host "
                 "only. The red outline: the node(s) the event moved.")
    _tour_hosttier.show()
    st.stop()
if name in hy.TOUR_WALKS:  # two models' component trees, vLLM's groups (pages/_tour_hybrid.py)
    long_caption(_tour_hybrid.ABOUT)
    _tour_hybrid.show(hy.TOUR_WALKS[name])
    st.stop()
run, tl, cursors, owners = _tour(name)
long_caption(WALKS[name].about + " Each request: match_prefix, inc_lock_ref, insert, "
             "dec_lock_ref, as SGLang's scheduler does; vLLM's block cache takes the same calls.")


def _from_link(params: dict[str, str]) -> int | None:
    """The frame a deep link asks for; a step or event past the walk's, or not a number, is
    brought to the nearest there is and said (issue 41: `k=99` silently opened step 0)."""
    if "step" not in params:
        return None
    try:
        step = int(params["step"])
    except ValueError:
        st.session_state["tour.link_note"] = (f"The link's step={params['step']!r} is not a "
                                              "number: showing the start.")
        return None
    raw_k = params.get("k", "0")
    k = int(raw_k) if raw_k.lstrip("-").isdigit() else 0
    at_step = min(max(step, 0), tl.num_steps)
    at_k = min(max(k, 0), tl.num_micro(at_step))
    if (at_step, at_k, str(k)) != (step, k, raw_k):
        st.session_state["tour.link_note"] = (
            f"The link asked for step {step}, event {raw_k}; this walk has steps 0 to "
            f"{tl.num_steps} and step {at_step} has {tl.num_micro(at_step)} events: showing "
            f"step {at_step}, event {at_k}.")
    return cursors.index((at_step, at_k))


player = Player(f"tour.{name}", len(cursors), page="tour", from_link=_from_link,
                to_link=lambda i: {"step": str(cursors[i][0]), "k": str(cursors[i][1])})
player.buttons()
if "tour.link_note" in st.session_state:
    say("warning", st.session_state.pop("tour.link_note"))


def _show(i: int, duration_ms: int) -> None:
    step, k = cursors[i]
    frame = tl.frame(step, k)
    if not presenter():  # on a projector the narration and the slider say where we are
        st.markdown(f"**Step {step} / {tl.num_steps}, event {k} / {tl.num_micro(step)}**")
    say("info", frame.narration or "…")
    # 335: with a two-line step sentence (a unified split's), the numbers row stays above the
    # fold at 1280x800 in presenter mode; a longer sentence takes its lines off the pictures
    # (tests/browser/test_presenter.py)
    px = below_alert_px(tree_height(335), frame.narration or "…")
    left, right = st.columns([3, 2])  # the pictures first: on a projector they stay in view
    with left:
        _tree(frame, duration_ms, px)
    with right:
        _blocks(step, k, px)
        if not presenter():
            _lookup(step, k)
    n = tour_numbers(run, frame.snapshot, step, k)
    m = st.columns(5)
    m[0].metric("tree stores", f"{n.stored:,} tok")
    m[1].metric("stored apart", f"{n.apart:,} tok")
    m[2].metric("saved", f"{n.saved:,} tok")
    m[3].metric("saved KV", f"{n.saved_mib:,.0f} MiB")
    m[4].metric("saved prefill", f"{n.saved_prefill_ms:,.1f} ms")
    st.caption(f"MiB and ms: {LABEL}. Both caches: capacity {run.capacity:,} tokens.")
    if presenter():  # under the numbers: beside the grid it pushed them below the fold
        _lookup(step, k)
    st.dataframe(_counter_table(step, k, frame.snapshot), hide_index=True)


def _tree(frame, duration_ms: int, px: int) -> None:
    selected = st.session_state.get("tour.selected")
    highlight = dict(frame.highlight)
    if selected is not None and selected not in highlight:
        highlight[selected] = "selected"
    box = presenter_tree_px(0.6, px)  # the left of columns [3, 2]
    # what the sentence names stays drawn, and where it speaks of access times they are shown
    items = {"highlight": highlight, "keep": sorted(frame.named), "names": frame.labels}
    scene = (fit_tree_scene(frame.snapshot, *box, min_font_px(), **items) if box
             else tree_scene(frame.snapshot, **items))
    clicked = tree_view(scene, key="tour.tree", height=px, duration_ms=duration_ms,
                        max_scale=max_scale(), min_font_px=min_font_px())
    if clicked is not None:
        st.session_state["tour.selected"] = clicked
    long_caption(flavor_line(run.flavor))
    node = frame.snapshot.by_id().get(st.session_state.get("tour.selected"))
    if node is not None and node.parent is not None:
        say("caption", node_line(node, owners.get(node.id)))


def _blocks(step: int, k: int, px: int) -> None:
    """vLLM's block pool beside the tree, after the block call that stands beside this step:
    a keyed ECharts grid, changed in place from step to step (a plotly grid was re-mounted,
    blank for a frame, viz/grid_chart.py); in presenter mode no taller than the tree (`px`)."""
    snap = run.blocks[block_index(step, k, tl.num_steps)]
    rid = rid_at(run, step)
    prompt = run.prompts[run.rids.index(rid)]
    chain = [link.block_id for link in request_chain(snap, prompt) if link.block_id]
    grid = block_grid_chart(snap, columns=24, chain_ids=chain,
                            stop_text=f"vLLM block pool: {rid}'s chain outlined")
    height = min(grid_height(grid), px) if presenter() else grid_height(grid)
    st.echarts_chart(grid, key="tour.blocks", height=height, renderer="svg")


def _lookup(step: int, k: int) -> None:
    """Where vLLM's lookup for this step's request stopped, and the pool in words."""
    snap = run.blocks[block_index(step, k, tl.num_steps)]
    rid = rid_at(run, step)
    rec = lookup_of(run, rid, step, k)
    if rec is None:
        say("caption", f"{rid} has not been looked up yet.")
    else:
        i = run.rids.index(rid)
        hit = next(e.prefix_len for e in run.log.micro_events(run.match_steps[i])
                   if type(e).__name__ == "PrefixMatched")
        say("caption", lookup_line(rec, snap.block_size, hit))
    if not presenter():
        st.caption(grid_caption(snap) + " " + queue_line(snap))


def _counter_table(step: int, k: int, snapshot) -> dict[str, list[str]]:
    t, b = tree_counters(run, snapshot, step, k), block_counters(run, step, k)
    rows = [("hit tokens", lambda c: f"{c.hit:,} of {c.looked_up:,}"),
            ("hit rate", lambda c: f"{c.hit_rate:.1%}"),
            ("cached tokens", lambda c: f"{c.cached:,}"),
            ("evictable tokens", lambda c: f"{c.evictable:,}"),
            ("protected tokens", lambda c: f"{c.protected:,}")]
    return {"": [r[0] for r in rows], "radix tree": [f(t) for _, f in rows],
            "block cache (16-token blocks)": [f(b) for _, f in rows]}


def _export_frame(i: int) -> tuple[dict, str]:
    f = tl.frame(*cursors[i])
    return (tree_scene(f.snapshot, highlight=f.highlight, names=f.labels),
            f.narration or f"step {f.step}")


player.frames(_show)
with export_panel("export frames for slides (animated HTML)", "tour") as open_:
    if open_:
        player.export(name, _export_frame)
