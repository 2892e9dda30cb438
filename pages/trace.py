"""Trace debugger: replay any trace through both caches, then inspect any step of it."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from pages._serve import holdings, jobs, wait_for
from pages._shell import long_caption, say, session_id
from pages._trace_blocks import show_recording
from pages._trace_view import show_replay
from radix.blocks.hashing import HASH_ALGOS, VLLM_NONE_HASH_SEED
from radix.models import PRESETS
from radix.traces.fields import TraceError
from runtime.budget import (
    BUDGET,
    BudgetError,
    give_back_memory,
    mib,
    resident_growth,
    server_limits,
)
from runtime.jobs import QueueFull
from scenarios.trace import Cancelled, digest, replay
from viz.hybrid_words import model_label

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"
SAMPLES = {p.name: p for p in (EXAMPLES / "mooncake_excerpt.jsonl",
                               EXAMPLES / "mooncake_synthetic_trace.jsonl") if p.is_file()}

st.title("Trace debugger")
long_caption("Any trace format (request JSONL, Mooncake, KV events, op log). Both caches get the "
             "same capacity; the radix tree's invariants are checked after every request "
             "(past 2,000 requests, 250 times spread over the trace). Uploads are cached by "
             "content; a new one releases the last one's memory.")
c = st.columns([3, 2, 1.3])
upload = c[0].file_uploader("trace file", key="trace.upload")
sample = c[1].selectbox("or a sample", ["(none)", *SAMPLES], key="trace.sample")
capacity = int(c[2].number_input("capacity (tokens)", 1_000, 100_000_000, 1_000_000,
                                 step=100_000, key="trace.capacity"))
h = st.columns([1.3, 1.7, 3])
hash_algo = h[0].selectbox(
    "block hashes", HASH_ALGOS, key="trace.hash",
    help="How the block cache hashes blocks (hits do not depend on it): radixlens is fast; "
         "vllm-sha256 (vLLM's default: sha256 over pickle) and vllm-sha256-cbor give vLLM's "
         "own hashes, to compare with a recording")
seed = h[1].text_input("vLLM hash seed", VLLM_NONE_HASH_SEED, key="trace.hash_seed",
                       disabled=hash_algo == "radixlens",
                       help="vLLM seeds the first block's parent with PYTHONHASHSEED when the "
                            "engine set it; else with this default")
recording = None  # a recording can only match vLLM's hashes
if hash_algo != "radixlens":
    recording = h[2].file_uploader("vLLM KV-event recording of the same requests (optional)",
                                   key="trace.recording")
model = st.selectbox("model: its hybrid caches too (optional)", ["(none)", *PRESETS],
                     key="trace.model", format_func=lambda m: m if m == "(none)" else
                     model_label(m), help="SGLang's component tree and vLLM's KV-cache groups "
                     "for this model's layers (python -m radix compare --model), above the "
                     "full-attention replay")
sid = session_id()
usage = BUDGET.usage(sid)
rss = resident_growth()
st.caption(f"Memory (estimated): this session holds {mib(usage.session)} of its "
           f"{mib(usage.session_limit)}; the server {mib(usage.process)} of "
           f"{mib(usage.process_limit)} for all sessions."
           + ("" if rss is None else f" Measured: the server process is {mib(rss[0])} resident, "
              f"{mib(rss[1])} more than at its first page run (every session's uploads and "
              "the other pages' caches; the estimate counts replays only)."))
if upload is not None:
    data, name = upload.getvalue(), upload.name
elif sample != "(none)":
    data, name = SAMPLES[sample].read_bytes(), sample
else:
    st.info("Upload a trace to replay it, or pick a sample.")
    st.stop()

key = (digest(data), capacity, hash_algo, seed if hash_algo != "radixlens" else None)
held = holdings()
st.session_state["trace.sid"] = sid  # where this session's replay is held (tests read it)
state = held.get(sid, "trace")  # the replay lives outside session_state: freed on a sweep
if state is None or state["key"] != key:
    if state is not None and state.get("job") is not None:
        state["job"].cancel()
    held.put(sid, "trace", None)  # drop the old replay before the new one runs
    BUDGET.release(sid, "trace replay")
    BUDGET.release(sid, "trace explain")
    BUDGET.release(sid, "trace hybrid run")  # (scenarios/trace_hybrid.py's, on a model)
    if state is not None:
        state = None
        give_back_memory()  # the old replay's pages go back to the system
    try:
        job = jobs().submit(name, lambda progress, cancel: replay(
            data, name, capacity, limits=server_limits(), session_id=sid, budget=BUDGET,
            progress=progress, cancel=cancel, hash_algo=hash_algo, hash_seed=seed))
    except QueueFull as exc:
        say("error", f"The server is busy: {exc}")
        st.stop()
    state = {"key": key, "job": job, "replay": None}
    held.put(sid, "trace", state)
    for k in ("trace.at", "trace.box", "trace.slider"):
        st.session_state.pop(k, None)

job = state["job"]
if state["replay"] is None:
    if not wait_for(job, name):
        st.stop()
    if job.state == "cancelled":
        say("info", f"{name}: replay cancelled; change the file or the capacity to start again.")
        st.stop()
    try:
        state["replay"], state["job"] = job.take(), None  # wait_for's fragment keeps `job`
    except TraceError as exc:
        say("error", f"{name}: {exc}")
        st.stop()
    except BudgetError as exc:
        say("error", f"{name}: too big for this server's memory budget: {exc}")
        st.stop()
    except Cancelled:
        say("info", f"{name}: replay cancelled.")
        st.stop()
    except (ValueError, OSError, MemoryError, RecursionError) as exc:
        say("error", f"{name}: cannot replay: {type(exc).__name__}: {exc}")
        st.stop()

if recording is not None:
    show_recording(state["replay"], recording.getvalue(), state)
if model != "(none)":  # (imported here: it runs radix.runs.hybrid_compare, the --model runs)
    from pages._trace_hybrid import show_hybrid

    show_hybrid(state["replay"], state, sid, model)
show_replay(state["replay"], state, sid)
