"""The Trace debugger on a hybrid model: the trace through both engines' hybrid caches for the
model chosen (scenarios/trace_hybrid.py, the `--model` runs' own code) as a job, then each
engine's figures, and any request: SGLang's component tree at its match (its path up to the
hit in blue, past it in red where full attention alone matched) or after it, why the hit was
cut, and vLLM's lookup by KV-cache group with the intersection's cut.
Not a page: pages/trace.py calls `show_hybrid` when a model is chosen.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._serve import jobs, wait_for
from pages._shell import max_scale, min_font_px, presenter, presenter_fit, say, tree_height
from radix.traces.fields import TraceError
from runtime.budget import BUDGET, BudgetError
from runtime.jobs import QueueFull
from scenarios.trace import Cancelled
from scenarios.trace_hybrid import WHAT, HybridTrace, request_at, run_hybrid
from viz.component import tree_view
from viz.group_grid import grid_px, group_grid_chart, group_rows
from viz.hybrid import component_scene, frame_highlight
from viz.hybrid_words import match_line, model_label, outcome_line, totals_rows, vllm_line

KEY = "trace.hybrid"
MAX_CHILDREN = 8  # a trace's tree: children drawn per node, the rest folded and counted


def show_hybrid(r: Any, state: dict, sid: str, model: str) -> None:
    say("subheader", f"On {model_label(model)}: SGLang's component tree and vLLM's KV-cache "
                     "groups")
    if r.trace.format in ("ops", "kv_events"):
        say("info", "A model's hybrid caches take a request trace (a Mooncake or request "
                    "JSONL), not an op log or a KV-event recording.")
        return
    h = _run(r, state, sid, model)
    if h is None:
        return
    for engine, lines in (("vLLM 0.33", h.assumptions["vllm"]),
                          ("SGLang 0.5.23", h.assumptions["sglang"])):
        say("caption", f"{engine}: " + "; ".join(lines))
    st.dataframe(totals_rows(h.totals), hide_index=True)
    _request(r, h)


def _run(r: Any, state: dict, sid: str, model: str) -> HybridTrace | None:
    """The run for `model` (a job; None while it runs or when it failed, said)."""
    held = state.get("hybrid")
    if held is None or held["model"] != model:
        if state.get("hybrid_job") is not None:
            state["hybrid_job"].cancel()
        state["hybrid"] = None
        BUDGET.release(sid, WHAT)
        try:
            job = jobs().submit(f"{r.name} on {model}", lambda progress, cancel: run_hybrid(
                r.trace, model, session_id=sid, budget=BUDGET, progress=progress,
                cancel=cancel))
        except QueueFull as exc:
            say("error", f"The server is busy: {exc}")
            return None
        # the job at the state's top: letting go of the state (a new trace, a closed tab)
        # cancels it (pages/_serve.py's Holdings)
        held = state["hybrid"] = {"model": model, "run": None}
        state["hybrid_job"] = job
    if held["run"] is None:
        job = state["hybrid_job"]
        if not wait_for(job, f"{r.name} on {model_label(model)}"):
            return None
        try:
            held["run"], state["hybrid_job"] = job.take(), None
        except Cancelled:
            say("info", "Run cancelled: choose the model again to start it.")
            return None
        except (BudgetError, MemoryError, TraceError, ValueError, RuntimeError) as exc:
            say("error", f"{r.name} on {model_label(model)}: cannot run: {exc}")
            return None
    return held["run"]


def _request(r: Any, h: HybridTrace) -> None:
    """One request: the navigator, the tree, the words and vLLM's groups."""
    n = len(h.sglang)
    c = st.columns([1, 2, 2])
    i = int(c[0].number_input("request (1 = the first)", 1, n, 1, key=f"{KEY}.i")) - 1
    after = c[1].radio("the tree", ("at its match", "after it"), horizontal=True,
                       key=f"{KEY}.after") == "after it"
    rid = c[2].text_input("find a request id", key=f"{KEY}.find", on_change=_find, args=(r,))
    if rid and rid.strip() not in {t.rid for t in r.trace.requests}:
        say("caption", f"No request {rid.strip()!r} in this trace.")
    tr = r.trace.requests[i]
    nodes, match = request_at(h, i, after)
    matched = next((e for e in match if type(e).__name__ == "HybridPrefixMatched"), None)
    label = model_label(h.model.preset)
    if matched is not None:
        say("info", match_line(f"{tr.rid} on {label}, SGLang", h.model, tr.rid, matched,
                               nodes, tr.token_ids))
    left, right = st.columns([3, 2])
    with left:
        hl = frame_highlight(nodes, match, tr.token_ids)
        px = tree_height(380)
        scene = component_scene(nodes, h.model.components, hl, presenter_fit(0.6, px),
                                MAX_CHILDREN)
        tree_view(scene, key=f"{KEY}.tree", height=px, duration_ms=250, max_scale=max_scale(),
                  min_font_px=min_font_px())
        if not presenter():
            st.caption(f"{len(nodes):,} nodes; at most {MAX_CHILDREN} children drawn a node, "
                       "the rest folded into '+K more' boxes. Blue: the path to the hit; "
                       "red: matched by full attention only.")
    with right:
        for engine, o in (("sglang", h.sglang[i]), ("vllm", h.vllm[i])):
            say("markdown", outcome_line(engine, o))
        look = h.lookups.get(tr.rid)
        if look is not None:
            rows = group_rows(h.model.kinds, h.model.block_size, h.model.vllm_window, look)
            px_text = int(min_font_px()) or 12
            title = f"vLLM: the lookup by group (block {h.model.block_size:,})"
            st.echarts_chart(group_grid_chart(rows, h.model.block_size, look.hit_tokens, title,
                                              px_text),
                             key=f"{KEY}.groups", height=grid_px(rows, px_text), renderer="svg")
            say("caption", vllm_line(h.model, look))


def _find(r: Any) -> None:
    """The search box's callback: go to the request with that id."""
    rid = st.session_state.get(f"{KEY}.find", "").strip()
    rids = [t.rid for t in r.trace.requests]
    if rid in rids:
        st.session_state[f"{KEY}.i"] = rids.index(rid) + 1
