"""Trace debugger: upload a trace, replay it through both caches, inspect the tree at any step."""

from __future__ import annotations

import json

import streamlit as st

from radix.traces.base import TraceError
from radix.tree.inspect import format_tree
from viz.blocks_chain import queue_line
from viz.blocks_grid import block_grid_figure, grid_caption
from viz.blocks_trace import chain_view, replay_blocks, request_ends, requests_done, tree_matches
from viz.component import tree_view
from viz.dot import dot_to_svg, fold_tree, tree_to_dot
from viz.trace_debug import (
    kv_events_summary,
    replay_trace,
    snapshot_json,
    step_highlight,
    text_head,
)

MAX_DRAWN_NODES = 2_000  # boxes drawn after folding (1,000 draw in ~0.4 s); more: text only

st.title("Trace debugger")
st.caption("Any trace format (request JSONL, Mooncake, KV events, op log). Both caches get the "
           "same capacity; the radix tree is checked after every request.")
upload = st.file_uploader("trace file", key="trace.upload")
capacity = st.number_input("capacity (tokens)", 1_000, 100_000_000, 1_000_000, step=100_000,
                           key="trace.capacity")
if upload is None:
    st.info("Upload a trace to replay it, e.g. examples/traces/mooncake_excerpt.jsonl.")
    st.stop()

ident = (upload.name, upload.size, int(capacity))
if st.session_state.get("trace.ident") != ident:
    try:
        with st.spinner("replaying through both caches…"):
            replay = replay_trace(upload.getvalue(), capacity=int(capacity))
    except TraceError as exc:
        st.error(f"{upload.name}: {exc}")
        st.stop()
    except (ValueError, OSError) as exc:
        st.error(f"{upload.name}: cannot replay: {exc}")
        st.stop()
    st.session_state["trace.ident"], st.session_state["trace.replay"] = ident, replay
replay = st.session_state["trace.replay"]
log = replay.log
if replay.trace.format == "kv_events":
    st.subheader(f"{upload.name}: a vLLM KV-events recording")
    st.info(kv_events_summary(replay.trace))
    st.stop()

st.subheader(f"Replay summary: {upload.name} ({replay.trace.format}, "
             f"{len(replay.trace.requests):,} requests, {log.num_steps:,} tree steps)")
if replay.summary is not None:
    rows = [(k, replay.summary["tree"][k], replay.summary["blocks"][k])
            for k in ("requests", "prompt_tokens", "hit_tokens", "hit_rate", "prefilled_tokens",
                      "evictions", "evicted_tokens", "unreachable_blocks")]
    st.dataframe({"": [r[0] for r in rows], "radix tree": [str(r[1]) for r in rows],
                  "block cache": [str(r[2]) for r in rows]}, hide_index=True)
if replay.first_bad_step is None:
    st.success("Invariants held after every request.")
else:
    st.error(f"First bad step: {replay.first_bad_step:,}. {replay.violation}")

step = st.slider("tree after step", 0, log.num_steps, log.num_steps, key="trace.step")
snap = log.snapshot_at(step)
events = log.events_of(step - 1) if step else []
if events:
    st.caption(f"step {step - 1}: {events[0].op} {getattr(events[0], 'rid', '') or ''} "
               f"({len(events)} events)")
f = st.columns(2)
max_children = int(f[0].number_input(
    "children drawn per node", 1, 500, 12, key="trace.max_children",
    help="The rest fold into one '+K more' node (counted in full). What the step touched, "
         "locked nodes and the largest subtrees are drawn first."))
max_depth = int(f[1].number_input("depth cap (0: none)", 0, 1_000, 0, key="trace.max_depth"))
max_depth = max_depth or None
highlight = step_highlight(events, snap)
plan = fold_tree(snap, max_children, max_depth, highlight)
dot = tree_to_dot(snap)  # the whole tree, for the downloads
left, right = st.columns([3, 2])
with left:
    drawn = len(plan.drawn) + len(plan.folds)
    st.caption(f"{len(snap.nodes):,} nodes: {len(plan.drawn):,} drawn, "
               f"{len(snap.nodes) - len(plan.drawn):,} folded into {len(plan.folds):,} "
               "'+K more' box(es), counted in full."
               + (" Coloured: what the step touched." if highlight else ""))
    if drawn <= MAX_DRAWN_NODES:
        # LR: a wide fan-out stacks down the column instead of shrinking to a thin line
        tree_view(tree_to_dot(snap, highlight=highlight, rankdir="LR", max_children=max_children,
                              max_depth=max_depth), key="trace.tree", height=420, duration_ms=250)
    else:
        st.info(f"{drawn:,} boxes: too many to draw; lower the children per node or the depth.")
with right:
    text = format_tree(snap, mark_leaves=True)
    head, note = text_head(text, 200)
    st.code(head, language=None)
    if note:
        st.caption(note)
    st.download_button("pretty_print.txt", text, "pretty_print.txt", key="trace.dl_text")


def _blocks(step: int) -> None:
    """vLLM's block pool after the requests the tree had finished by `step` (whole requests)."""
    if replay.trace.format not in ("request", "mooncake"):
        st.caption(f"No block view for a {replay.trace.format} trace (no requests to replay).")
        return
    if st.session_state.get("trace.ends_ident") != ident:
        st.session_state["trace.ends"] = (request_ends(log), tree_matches(log))
        st.session_state["trace.ends_ident"] = ident
    ends, matches = st.session_state["trace.ends"]
    n = requests_done(ends, step)
    if st.session_state.get("trace.blocks_ident") != (ident, n):
        st.session_state["trace.blocks"] = replay_blocks(replay.trace, int(capacity), 16, n)
        st.session_state["trace.blocks_ident"] = (ident, n)
    br = st.session_state["trace.blocks"]
    st.subheader(f"Block cache after {n:,} of {len(replay.trace.requests):,} requests")
    if not br.reqs:
        st.caption(grid_caption(br.snapshot))
        return
    rids = list(br.reqs)[::-1]  # the latest first
    rid = st.selectbox("hash chain of", rids, key="trace.block_rid")
    rid = rid if rid in br.reqs else rids[0]
    chain, text = chain_view(br, rid, matches.get(rid))
    st.plotly_chart(block_grid_figure(br.snapshot, chain_ids=chain,
                                      stop_text=f"vLLM block pool: {rid}'s chain outlined"),
                    key="trace.blocks_fig")
    st.caption(grid_caption(br.snapshot, chain_ids=chain)
               + f" {br.num_evictions:,} evictions so far.")
    st.markdown(text)
    st.caption(queue_line(br.snapshot))


_blocks(step)
d = st.columns(4)
d[0].download_button("tree.dot", dot, "tree.dot", key="trace.dl_dot")
# deferred (callables): built only when clicked; the event log of a big trace is large
d[1].download_button("tree.svg", lambda: dot_to_svg(dot), "tree.svg", key="trace.dl_svg")
d[2].download_button("tree.json", lambda: json.dumps(snapshot_json(snap)), "tree.json",
                     key="trace.dl_json")
d[3].download_button("events.jsonl", log.to_jsonl, "events.jsonl", key="trace.dl_log")
