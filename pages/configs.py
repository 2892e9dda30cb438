"""Configurations: DESIGN.md's four server configurations side by side on one workload."""

from __future__ import annotations

import streamlit as st

from pages._serve import jobs, wait_for
from pages._shell import long_caption, say
from radix.runs.costs import LABEL
from radix.traces import TraceError
from runtime.jobs import QueueFull
from scenarios.configs import SCENARIOS, run_configs, workload_trace
from scenarios.trace import digest
from viz.configs import config_table, hit_rate_figure, prefilled_figure

SOURCES = ("a scenario", "the Mooncake excerpt", "an uploaded trace")

st.title("Configurations")
long_caption("FCFS + LRU + page 1 (the baseline); LPM + SLRU; page size 16; cache disabled "
             "(every match empty). Same workload, same capacity and prefill budget; the "
             "simulated engine (radix/runs/sim.py) with vLLM's block cache beside the tree.")
source = st.radio("workload", SOURCES, horizontal=True, key="configs.source")
c = st.columns(2)
capacity = c[0].number_input("KV capacity (tokens, 0 = room for everything)", 0, 100_000_000, 0,
                             step=1_000, key="configs.capacity")
budget = c[1].number_input("prefill budget per round (tokens)", 1, 1_000_000, 16_384,
                           step=1_024, key="configs.budget")

if source == "a scenario":
    name = st.selectbox("scenario (examples/workloads.py)", list(SCENARIOS), key="configs.scenario")
    what, data, label = ("scenario", name), b"", "workload"
elif source == "the Mooncake excerpt":
    what, data, label = ("mooncake",), b"", "workload"
else:
    upload = st.file_uploader("request or Mooncake trace", key="configs.upload")
    if upload is None:
        st.info("Upload a request or Mooncake trace (JSONL, optionally .gz).")
        st.stop()
    data = upload.getvalue()
    what, label = ("upload", digest(data)), upload.name

ident = (*what, int(capacity), int(budget))
if st.session_state.get("configs.ident") != ident:
    cap, prefill = int(capacity) or None, int(budget)

    def work(progress, cancel, what=what, data=data):  # this run's choice, bound now
        trace = workload_trace(what, data)
        return len(trace.requests), run_configs(trace, cap, prefill, progress)

    try:
        st.session_state["configs.job"] = jobs().submit(label, work)
    except QueueFull as exc:
        say("error", f"The server is busy: {exc}")
        st.stop()
    st.session_state["configs.ident"], st.session_state["configs.runs"] = ident, None
if st.session_state["configs.runs"] is None:
    job = st.session_state["configs.job"]
    if not wait_for(job, "simulating the four configurations"):
        st.stop()
    if job.state == "cancelled":
        st.session_state.pop("configs.ident", None)
        st.info("Cancelled: change a setting or rerun to simulate again.")
        st.stop()
    try:
        st.session_state["configs.runs"] = job.result()
    except TraceError as exc:
        say("error", f"{label}: {exc}")
        st.stop()
    except (ValueError, OSError, MemoryError) as exc:
        say("error", f"{label}: cannot simulate: {exc}")
        st.stop()
num_requests, runs = st.session_state["configs.runs"]

cap = f"{int(capacity):,} tokens" if capacity else "room for everything"
st.subheader(f"{num_requests:,} requests; capacity: {cap}; budget {int(budget):,} tokens")
st.dataframe(config_table(runs), hide_index=True)
st.caption(f"Prefill seconds: {LABEL}. Hit rate (blocks): vLLM's block cache (16-token blocks) "
           "fed the same requests; block evictions and unreachable blocks are its counts.")
st.caption("Each point is one request, in arrival order: the hit rate and the tokens prefilled "
           "over all requests up to it.")
left, right = st.columns(2)
left.plotly_chart(hit_rate_figure(runs), key="configs.hit_rate", config={"displaylogo": False})
right.plotly_chart(prefilled_figure(runs), key="configs.prefilled", config={"displaylogo": False})
