"""The Trace debugger's block view, downloads and slides export for one replay and step.

Not a page (app.py does not list it): pages/_trace_view.py calls these. vLLM's pool is shown
after the requests the tree had finished by the step (whole requests), from the replay's block
keyframes (built the first time a step past them is shown, with a progress bar); a session keeps
the last few pools it drew.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from pages._player import export_range
from pages._shell import say
from scenarios.kvrecording import recording_verdict
from scenarios.trace import digest
from viz.blocks import block_grid_figure, grid_caption, lookup_line, queue_line, request_chain
from viz.dot import dot_to_svg, tree_dot
from viz.escape import safe_filename
from viz.grid_chart import block_grid_chart, grid_height
from viz.roles import step_highlight
from viz.scene import tree_scene
from viz.trace import id_labels, snapshot_json
from viz.words import step_caption

# the block view replays the per-block pool itself past this many requests only when asked:
# on the 12,031-request conversation stand-in every keyframe took 24 CPU-s, twice the summary's
# (14 CPU-s, about the summary's, since scenarios/blockbuilder.py; ~8, half of it, since the
# keyframes are hashed only when restored)
AUTO_BLOCK_REQUESTS = 2_000


def show_blocks(r: Any, step: int, cache: dict) -> None:
    """vLLM's block pool after the requests the tree had finished by `step` (whole requests).
    `cache` (step -> pool) is the session's held trace state, not st.session_state: a closed
    session's session_state lives on until Streamlit expires it, and these pools are ~tens of MB
    each on a Mooncake trace (issue 27: ~57 MB kept per closed session)."""
    n = r.requests_done(step)
    if n not in cache:
        if len(cache) > 8:
            cache.clear()
        if not r.blocks.ready(n):  # the per-block pool is replayed on demand, keyframes kept
            todo = n - (r.blocks.keyframes_built - 1) * r.blocks.every
            if todo > AUTO_BLOCK_REQUESTS and not st.button(
                    f"show vLLM's block pool after {n:,} requests (replays {todo:,} requests "
                    "block by block; the summary above needed none of it)",
                    key="trace.blocks_go"):
                return  # a long replay runs when asked for, not with every summary
            bar = st.progress(0.0, text="replaying vLLM's block pool up to this step")

            def built(done: int, want: int) -> None:
                bar.progress(done / want, text=f"replaying vLLM's block pool up to this step: "
                                               f"keyframe {done:,} of {want:,}")
            r.blocks.build(n, progress=built)
            bar.empty()
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


def show_downloads(r: Any, snap: Any, highlight: dict, max_children: int, text: str) -> None:
    base = safe_filename(r.name.rsplit(".", 1)[0])
    d = st.columns(5)
    d[0].download_button("pretty_print.txt", text, f"{base}-pretty_print.txt", key="trace.dl_text")
    # deferred (callables): built only when clicked; the event log of a big trace is large
    d[1].download_button("tree.dot", lambda: tree_dot(snap, highlight=highlight),
                         f"{base}-tree.dot", key="trace.dl_dot")
    d[2].download_button("tree.svg", lambda: dot_to_svg(tree_dot(
        snap, highlight=highlight, max_children=max_children)), f"{base}-tree.svg",
        key="trace.dl_svg")
    d[3].download_button("tree.json", lambda: json.dumps(snapshot_json(snap)),
                         f"{base}-tree.json", key="trace.dl_json")
    d[4].download_button("events.jsonl", r.log.to_jsonl, f"{base}-events.jsonl",
                         key="trace.dl_log")
    with st.expander("export steps for slides (animated HTML)"):
        export_range("trace", base, r.log.num_steps + 1, st.session_state["trace.at"],
                     lambda s: _export_frame(r, s, max_children))


def _export_frame(r: Any, step: int, max_children: int) -> tuple:
    """The tree at `step` with its caption, and vLLM's block pool then (when the replay has
    one) for below it."""
    snap = r.log.snapshot_at(step)
    events = r.log.events_of(step - 1) if step else []
    scene = tree_scene(snap, highlight=step_highlight(events, snap), rankdir="LR",
                       max_children=max_children, ids=id_labels(r.trace, 2))
    caption = step_caption(events) if events else "the empty tree"
    if r.blocks is None:
        return scene, caption
    n = r.requests_done(step)
    r.blocks.build(n)
    at = r.blocks.at(n)
    return scene, caption, block_grid_figure(
        at.snapshot, stop_text=f"vLLM block pool after {n:,} of {len(r.trace.requests):,} "
                               "requests")
