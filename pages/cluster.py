"""Cluster: three replicas behind a router; where each request went, the scores and why."""

from __future__ import annotations

import streamlit as st

from pages._shell import link_int, long_caption, presenter, say
from radix.cluster import ROUTERS
from radix.cluster.sweep_html import figures
from radix.runs.costs import LABEL
from scenarios.routing import (
    NOTE,
    REPLICAS,
    classroom_sweep,
    classroom_trace,
    compare_routers,
    run_routing,
    upload_trace,
)
from scenarios.routing_steps import change_note, step_changes
from scenarios.trace import digest
from viz.escape import esc_md
from viz.routing import (
    PRESENTER_FONT_PT,
    STEP_CSS,
    approx_tree_dot,
    arrow_line,
    replica_tree_dot,
    routing_chart,
    scores_rows,
)

# Presenter mode: each chart at its own size (a point is 4/3 px: the 11 pt labels are 14.7 px,
# the presenter rule's 14; an empty replica's lone root no longer blown up to 62 px) in a box
# of the chart's height that scrolls when the tree is bigger (issue 41: scaled to fit their
# columns the replica trees were 8.7-11.4 px)
PRESENTER_CSS = """<style>
[data-testid=stGraphVizChart] { overflow: auto !important; }
[data-testid=stGraphVizChart] svg { width: auto !important; height: auto !important;
  max-width: none !important; }
</style>"""

st.title("Cluster")
long_caption("N replicas of the simulated engine (each its own radix tree and pool) behind one "
             "router (radix/cluster/, the same routers `engine serve --dp N` uses). Round robin "
             "scatters a conversation's turns; cache-aware keeps them together until one "
             "replica's queue runs away. " + NOTE + ".")
if "cluster.router" not in st.session_state:
    wanted = st.query_params.get("router", "cache-aware")
    st.session_state["cluster.router"] = wanted if wanted in ROUTERS else "cache-aware"
c = st.columns([2, 2, 3])
router = c[0].selectbox("router", ROUTERS, key="cluster.router")
source = c[1].radio("workload", ("classroom", "an uploaded trace"), key="cluster.source")
st.query_params["router"] = router

slot = c[2]  # the slider's place: beside the choices, so the trees fit above the fold
if source == "classroom":
    ident, trace = ("classroom",), classroom_trace()
else:
    slot = st
    upload = c[2].file_uploader("request or Mooncake trace", key="cluster.upload")
    if upload is None:
        st.info("Upload a request or Mooncake trace (JSONL, optionally .gz).")
        st.stop()
    data = upload.getvalue()
    try:
        trace = upload_trace(data)
    except ValueError as exc:  # TraceError among them: the line and the field
        say("error", f"{upload.name}: {exc}")
        st.stop()
    ident = ("upload", digest(data))

key = (*ident, router)
if st.session_state.get("cluster.key") != key:
    st.session_state["cluster.run"] = run_routing(trace, router)
    st.session_state["cluster.key"] = key
run = st.session_state["cluster.run"]

n = len(run.routed)
step = slot.slider("request", 1, n, link_int("step", n, 1, n), key="cluster.step")
st.query_params["step"] = str(step)
row = run.routed[step - 1]
frame = run.frame_at(step - 1)
earlier = [f for f in run.frames if f.after < frame.after]
change = step_changes(earlier[-1] if earlier else None, frame)  # what this step changed
st.html(STEP_CSS + (PRESENTER_CSS if presenter() else ""))
font = PRESENTER_FONT_PT if presenter() else 14
st.markdown(arrow_line(row, router) + f". {esc_md(row.why)}; it matched "
            f"{row.matched_tokens:,} of {row.input_tokens:,} tokens there "
            f"(t = {row.arrival:.1f} s).")

cols = st.columns(len(frame.trees))
for k, snap in enumerate(frame.trees):
    chosen = k == row.replica
    cols[k].markdown(f"**replica {k}**" + (f" ← **{row.rid}**" if chosen else "")
                     + f": {snap.total_size:,} tokens ({change_note(change.replicas[k])})")
    cols[k].graphviz_chart(replica_tree_dot(snap, k, frame.prompt if chosen else (), chosen,
                                            change.replicas[k], font),
                           height=220 if presenter() else 320)
view = frame.view  # the router's own view at this step, as the trees
if view["kind"] == "approx-tree":
    new = len(change.view_added)
    st.markdown(f"**the router's view** ({router}, after {esc_md(row.rid)}): prompts it "
                f"routed, colour = replica (not what they cache); sizes {view['sizes']} "
                f"blocks, {new or 'no'} box{'es' * (new != 1)} changed")
    st.graphviz_chart(approx_tree_dot(view, change.view_added, font),
                      height=150 if presenter() else 260)
elif view["kind"] == "block-index":
    blocks = ", ".join(f"replica {k}: {n} ({d:+})" for k, (n, d)
                       in enumerate(zip(view["blocks"], change.view_blocks, strict=True)))
    st.markdown(f"**the router's view** (kv-overlap, after {esc_md(row.rid)}): blocks each "
                f"replica reported storing: {blocks}")
else:
    st.markdown(f"**the router's view** ({router}): none; it keeps no view of the caches")
kept = "" if frame.after == step - 1 else (
    f" (snapshots are kept every few requests on a long upload: this is after "
    f"{run.routed[frame.after].rid})")
since = "" if change.span == 1 else f" (since the kept frame {change.span} requests back)"
long_caption(f"Each replica's tree and the router's view right after {row.rid}, as at the next "
             f"arrival (a request still queued is not in its tree yet){kept}: tokens per node, "
             f"h = hits; the request's path has thick borders, its replica a yellow ground "
             f"that flashes. What this step changed{since}: new nodes and new or changed "
             f"router boxes grow in with a purple border, evicted nodes fade as dashed ghosts "
             f"(-tokens). The router's view: chains of blocks routed alike merged into one box.")

left, right = st.columns([3, 2])
# keyed ECharts: the slider moves the ring in place (a changed plotly figure was re-mounted
# blank for a frame, #24)
left.echarts_chart(routing_chart(run.routed, step - 1, REPLICAS), key="cluster.routing",
                   height=260, renderer="svg")
right.dataframe(scores_rows(row, router), hide_index=True)

t = run.totals
st.subheader(f"{router}: hit rate {t['hit_rate']:.1%}, TTFT p99 {t['ttft_p99_s']:.3f} s, "
             f"load spread {t['load_spread']:.2f}")
if source == "classroom":
    if "cluster.compare" not in st.session_state:
        st.session_state["cluster.compare"] = compare_routers(trace)
    st.dataframe([{**r, "hit_rate": f"{r['hit_rate']:.1%}", "ttft_p99_s": f"{r['ttft_p99_s']:.3f}",
                   "load_spread": f"{r['load_spread']:.2f}"}
                  for r in st.session_state["cluster.compare"]], hide_index=True,
                 key="cluster.compare_table")
    if st.button("sweep 1-4 replicas x every router", key="cluster.sweep_button"):
        st.session_state["cluster.sweep"] = classroom_sweep(trace)
    if st.session_state.get("cluster.sweep"):
        left, right = st.columns(2)
        for col, fig, name in zip((left, right), figures(st.session_state["cluster.sweep"]),
                                  ("hit", "p99"), strict=True):
            col.plotly_chart(fig, key=f"cluster.sweep_{name}", config={"displaylogo": False})
        long_caption("`python -m radix sweep` draws the same charts for any trace "
                     "(routers at their documented defaults here).")
long_caption(f"Seconds: {LABEL}.")
