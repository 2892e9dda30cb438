"""Configurations: DESIGN.md's four server configurations side by side on one workload."""

from __future__ import annotations

import streamlit as st

from radix.runs.costs import LABEL
from radix.traces import TraceError, load_trace
from viz.configs import (
    SCENARIOS,
    config_table,
    hit_rate_figure,
    prefilled_figure,
    run_configs,
    scenario_trace,
)

SOURCES = ("a scenario", "the Mooncake excerpt", "an uploaded trace")

st.title("Configurations")
st.caption("FCFS + LRU + page 1 (the baseline); LPM + SLRU; page size 16; cache disabled (every "
           "match empty). Same workload, same capacity and prefill budget; the simulated engine "
           "(engine/sim.py) with vLLM's block cache beside the tree.")
source = st.radio("workload", SOURCES, horizontal=True, key="configs.source")
c = st.columns(2)
capacity = c[0].number_input("KV capacity (tokens, 0 = room for everything)", 0, 100_000_000, 0,
                             step=1_000, key="configs.capacity")
budget = c[1].number_input("prefill budget per round (tokens)", 1, 1_000_000, 16_384,
                           step=1_024, key="configs.budget")

if source == "a scenario":
    name = st.selectbox("scenario (examples/workloads.py)", list(SCENARIOS), key="configs.scenario")
    ident, load = ("scenario", name), (lambda: scenario_trace(name))
elif source == "the Mooncake excerpt":
    ident, load = ("mooncake",), (lambda: scenario_trace("Mooncake excerpt"))
else:
    upload = st.file_uploader("request or Mooncake trace", key="configs.upload")
    if upload is None:
        st.info("Upload a request or Mooncake trace (JSONL, optionally .gz).")
        st.stop()
    ident, load = ("upload", upload.name, upload.size), (lambda: load_trace(upload.getvalue()))

ident = (*ident, int(capacity), int(budget))
if st.session_state.get("configs.ident") != ident:
    label = ident[1] if source == "an uploaded trace" else "workload"
    try:
        trace = load()
        if trace.format not in ("request", "mooncake"):
            raise ValueError(f"needs a request or Mooncake trace, got a {trace.format} trace")
        with st.spinner("simulating the four configurations…"):
            runs = run_configs(trace, int(capacity) or None, int(budget))
    except TraceError as exc:
        st.error(f"{label}: {exc}")
        st.stop()
    except (ValueError, OSError) as exc:
        st.error(f"{label}: cannot simulate: {exc}")
        st.stop()
    st.session_state["configs.ident"], st.session_state["configs.runs"] = ident, runs
    st.session_state["configs.num_requests"] = len(trace.requests)
runs = st.session_state["configs.runs"]

cap = f"{int(capacity):,} tokens" if capacity else "room for everything"
st.subheader(f"{st.session_state['configs.num_requests']:,} requests; capacity: {cap}; "
             f"budget {int(budget):,} tokens")
st.dataframe(config_table(runs), hide_index=True)
st.caption(f"Prefill seconds: {LABEL}. Hit rate (blocks): vLLM's block cache (16-token blocks) "
           "fed the same requests; block evictions and unreachable blocks are its counts.")
st.caption("Each point is one request, in arrival order: the hit rate and the tokens prefilled "
           "over all requests up to it.")
left, right = st.columns(2)
left.plotly_chart(hit_rate_figure(runs), key="configs.hit_rate")
right.plotly_chart(prefilled_figure(runs), key="configs.prefilled")
