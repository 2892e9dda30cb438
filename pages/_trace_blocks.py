"""The Trace debugger's block view, downloads and slides export for one replay and step.

Not a page (app.py does not list it): pages/_trace_view.py calls these. vLLM's pool is shown
after the requests the tree had finished by the step (whole requests), from the replay's block
keyframes (all built with the summary, scenarios/blockframes.py); a session keeps the last few
pools it drew.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._downloads import Item, show_item
from pages._player import export_panel, export_range
from pages._shell import say
from runtime.downloads import CAP_BYTES, human_size
from scenarios.kvrecording import recording_verdict
from scenarios.trace import digest
from viz.blocks import block_grid_figure, grid_caption, lookup_line, queue_line, request_chain
from viz.dot import dot_to_svg, tree_dot
from viz.escape import safe_filename
from viz.files import (
    estimate_events,
    estimate_tree,
    steps_within,
    write_events,
    write_tree,
)
from viz.grid_chart import block_grid_chart, grid_height
from viz.roles import step_highlight
from viz.scene import tree_scene
from viz.trace import id_labels, step_caption


def show_blocks(r: Any, step: int, cache: dict) -> None:
    """vLLM's block pool after the requests the tree had finished by `step` (whole requests).
    `cache` (step -> pool) is the session's held trace state, not st.session_state: a closed
    session's session_state lives on until Streamlit expires it, and these pools are ~tens of MB
    each on a Mooncake trace (issue 27: ~57 MB kept per closed session)."""
    n = r.requests_done(step)
    if n not in cache:
        if len(cache) > 8:
            cache.clear()
        cache[n] = r.blocks.at(n)
    at = cache[n]
    say("subheader", f"Block cache after {n:,} of {len(r.trace.requests):,} requests "
                     f"({at.num_evictions:,} evictions so far)")
    rids = [rq.rid for rq in r.trace.requests[:n]][::-1][:500]  # the latest first
    if not rids:
        st.caption(grid_caption(at.snapshot))
        return
    rid = st.selectbox("hash chain of", rids, key="trace.block_rid")
    rid = rid if rid in rids else rids[0]
    i = next(j for j, rq in enumerate(r.trace.requests) if rq.rid == rid)
    req = next(iter(r.blocks.feed(i, i + 1)))[0]
    links = request_chain(at.snapshot, req.origin_input_ids, req.extra_key, req.cache_salt,
                          r.hasher)
    chain = [lk.block_id for lk in links if lk.block_id is not None]
    # keyed ECharts: a step or request change redraws the grid in place (viz/grid_chart.py);
    # the export below keeps the plotly figure
    grid = block_grid_chart(at.snapshot, chain_ids=chain,
                            stop_text=f"vLLM block pool: {rid}'s chain outlined")
    st.echarts_chart(grid, key="trace.blocks_fig", height=grid_height(grid), renderer="svg")
    st.caption(grid_caption(at.snapshot, chain_ids=chain))
    say("markdown", lookup_line(r.blocks.lookups[i], at.snapshot.block_size, r.matches.get(rid)))
    st.caption(queue_line(at.snapshot))


def show_recording(r: Any, data: bytes, state: dict) -> None:
    """A vLLM KV-event recording beside a replay of the same requests
    (scenarios/kvrecording.py recording_verdict), cached in `state`."""
    algo, seed = r.hasher.hash_algo, r.hasher.seed
    key = (r.digest, digest(data), algo, seed)
    held = state.get("recording")
    if held is None or held[0] != key:
        with st.spinner("replaying the requests with the recording's block size"):
            text = recording_verdict(r.trace, data, algo, seed)
        held = state["recording"] = (key, text)
    say(held[1][0], held[1][1])


DOT_NODE_BYTES, SVG_BOX_BYTES = 240, 1_200  # measured means (examples/traces): sizes before


def show_downloads(r: Any, snap: Any, highlight: dict, max_children: int, drawn: int,
                   text: str, state: dict | None = None) -> None:
    """The tree at this step (pretty_print, DOT, SVG of `drawn` boxes, JSON) and the event log,
    each written to a file first (pages/_downloads.py) with its size said before the click;
    past the cap, their gzipped and filtered forms."""
    state = {} if state is None else state
    base = safe_filename(r.name.rsplit(".", 1)[0])
    step = st.session_state["trace.at"]
    at = (r.digest, step)  # what the tree's files are made from
    tree_size = estimate_tree(snap)
    events = state.get("events_estimate")
    if events is None or events[0] != r.digest:
        events = state["events_estimate"] = (r.digest, estimate_events(r.log.steps))
    events = events[1]
    st.caption("Downloads, their sizes said before the click: each file is written on the "
               "server first, then its link downloads it.")
    d = st.columns(5)
    raw = text.encode()
    show_item(Item("trace.text", f"{base}-pretty_print.txt", len(raw), True,
                   lambda out, *_: out.write(raw), at, eager=True, label="pretty_print.txt"), d[0])
    show_item(Item("trace.dot", f"{base}-tree.dot", DOT_NODE_BYTES * len(snap.nodes), False,
                   lambda out, *_: out.write(tree_dot(snap, highlight=highlight).encode()),
                   at, label="tree.dot"), d[1])
    show_item(Item("trace.svg", f"{base}-tree.svg", SVG_BOX_BYTES * drawn, False,
                   lambda out, *_: out.write(dot_to_svg(tree_dot(
                       snap, highlight=highlight, max_children=max_children)).encode()),
                   (*at, max_children), label="tree.svg"), d[2])
    show_item(Item("trace.json", f"{base}-tree.json", tree_size.size, tree_size.exact,
                   lambda out, *_: write_tree(out, snap), at,
                   label="tree.json"), d[3])
    show_item(Item("trace.events", f"{base}-events.jsonl", events.size, events.exact,
                   lambda out, progress, cancel: write_events(out, r.log.steps,
                                                              progress=progress, cancel=cancel),
                   (r.digest,), eager=True, label="events.jsonl"), d[4])
    if tree_size.size > CAP_BYTES or events.size > CAP_BYTES:
        _smaller(r, snap, base, at, tree_size, events, step, state)
    with export_panel("export steps for slides (animated HTML)", "trace") as open_:
        if open_:
            figures: dict[int, Any] = {}  # one block figure per pool (frames share them)
            export_range("trace", base, r.log.num_steps + 1, step,
                         lambda s: _export_frame(r, s, max_children, figures=figures),
                         ident=(r.digest,),
                         sample=lambda s: _export_frame(r, s, max_children))


def _smaller(r: Any, snap: Any, base: str, at: tuple, tree_size: Any, events: Any, step: int,
             state: dict) -> None:
    """The forms of an over-cap file that fit: gzipped, a step range of the log, the tree
    without its ids."""
    st.caption(f"Smaller forms of what is over the {human_size(CAP_BYTES)} cap for a download:")
    d = st.columns([1, 1, 2])
    if tree_size.size > CAP_BYTES:
        show_item(Item("trace.json_gz", f"{base}-tree.json.gz", tree_size.gz_size, False,
                       lambda out, *_: write_tree(out, snap, compress=True), at,
                       label="tree.json.gz"), d[0])
        bare = estimate_tree(snap, ids=False)
        show_item(Item("trace.json_bare", f"{base}-tree-no-ids.json", bare.size, bare.exact,
                       lambda out, *_: write_tree(out, snap, ids=False), at,
                       label="tree.json without ids"), d[0])
    if events.size <= CAP_BYTES:
        return
    show_item(Item("trace.events_gz", f"{base}-events.jsonl.gz", events.gz_size, False,
                   lambda out, progress, cancel: write_events(
                       out, r.log.steps, compress=True, progress=progress, cancel=cancel),
                   (r.digest,), label="events.jsonl.gz"), d[1])
    n = r.log.num_steps
    window = state.get("events_window")
    if window is None or window[0] != r.digest:
        window = state["events_window"] = (r.digest, steps_within(r.log.steps, step,
                                                                   CAP_BYTES // 4))
    lo, hi = d[2].slider("steps of the event log to write", 1, n, (window[1][0] + 1,
                         window[1][1]), key="trace.events_range",
                         help="numbered as the step box counts: step 1 is the log's first")
    part = state.get("events_part")
    if part is None or part[0] != (r.digest, lo, hi):
        part = state["events_part"] = ((r.digest, lo, hi),
                                       estimate_events(r.log.steps, lo - 1, hi))
    show_item(Item("trace.events_part", f"{base}-events-{lo}-{hi}.jsonl", part[1].size,
                   part[1].exact, lambda out, progress, cancel: write_events(
                       out, r.log.steps, lo - 1, hi, progress=progress, cancel=cancel),
                   (r.digest, lo, hi), label=f"events.jsonl, steps {lo:,}..{hi:,}"), d[2])


def _export_frame(r: Any, step: int, max_children: int,
                  figures: dict[int, Any] | None = None) -> tuple:
    """The tree at `step` with its caption, and vLLM's block pool then (when the replay has
    one) for below it (every block keyframe is built with the summary, so any step has one).
    `figures`: the pools' figures made so far, by requests done (steps of one request share
    one)."""
    snap = r.log.snapshot_at(step)
    events = r.log.events_of(step - 1) if step else []
    scene = tree_scene(snap, highlight=step_highlight(events, snap), rankdir="LR",
                       max_children=max_children, ids=id_labels(r.trace, 2))
    caption = step_caption(events, r.log.num_steps) if events else "the empty tree"
    if r.blocks is None:
        return scene, caption
    n = r.requests_done(step)
    figures = {} if figures is None else figures
    if n not in figures:
        figures[n] = block_grid_figure(
            r.blocks.at(n).snapshot,
            stop_text=f"vLLM block pool after {n:,} of {len(r.trace.requests):,} requests")
    return scene, caption, figures[n]
