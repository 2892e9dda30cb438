"""The Trace debugger's "Why this hit rate?" panel: buckets, their requests, the what-ifs.

Not a page (app.py does not list it): pages/_trace_view.py calls `show_explainer` with the
replay and the session's holdings state. The explainer runs as a job (scenarios/explain.py),
cached per trace content, capacity and policy; each bucket names its largest requests with a
button that moves the debugger (`trace.at`) to the step where that request was looked up. The
what-ifs run in worker processes (one per CPU) that exit when done; cancel kills them. The
host tier section (off until a host pool is chosen) is `explain --host-ratio`'s, as its own job.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._serve import jobs, wait_for
from pages._shell import say
from pages._trace_why import show_causes
from radix.hosttier.capacity import WRITE_POLICIES
from runtime.budget import BudgetError
from runtime.jobs import QueueFull
from scenarios.explain import (
    HOST_RATIOS,
    POLICIES,
    host_rows,
    host_summary,
    run_explain,
    run_host_tier,
    run_what_ifs,
    step_of,
    what_if_estimate,
    what_if_workers,
)
from scenarios.trace import Cancelled
from viz.escape import esc_md
from viz.explain import (
    BUCKETS,
    SIDES,
    bucket_figure,
    bucket_rows,
    capacity_figure,
    loser_rows,
    namespace_figure,
    page_figure,
    prefix_rows,
)
from viz.words import tokens

AUTO_WHAT_IFS_S = 30.0  # what-ifs start by themselves when they should take less than this
PLOT = {"displaylogo": False}


def go_to_step(step: int, moved: str = "") -> None:
    """A callback's move of the Trace debugger to `step`: the step, its box and its slider,
    but not the widget `moved` that the user moved. Nothing else writes the box or the slider
    once they exist, so a value the browser sent while a run was under way (an arrow key held)
    is not pulled back to the value of an older run."""
    for key in ("trace.at", "trace.box", "trace.slider"):
        if key != moved:
            st.session_state[key] = step


def _go(step: int, rid: str | None = None) -> None:
    go_to_step(step)
    if rid is not None:
        st.session_state["trace.block_rid"] = rid


def _result(job: Any, what: str, state: dict, key: tuple) -> Any:
    """The job's result; or None, remembering why under `key` (shown until asked again)."""
    try:
        return job.result()
    except Cancelled:
        why = ("info", f"{what} cancelled.")
    except BudgetError as exc:
        why = ("error", f"{what}: too big for this server's memory budget: {exc}")
    except (ValueError, MemoryError, RecursionError) as exc:
        why = ("error", f"{what}: {type(exc).__name__}: {exc}")
    state["explain_stopped"] = (key, what, why)
    return None


def _stopped(state: dict, key: tuple, what: str) -> bool:
    """True (after saying why, with a button to try again) when `what` stopped for `key`."""
    held = state.get("explain_stopped")
    if held is None or held[:2] != (key, what):
        return False
    say(*held[2])
    if st.button(f"{what}: run again", key="trace.explain_again"):
        state.pop("explain_stopped", None)
        st.rerun()
    return True


def _submit(state: dict, name: str, fn: Any) -> Any:
    try:
        job = jobs().submit(name, fn)
    except QueueFull as exc:
        say("error", f"The server is busy: {exc}")
        return None
    state["explain_job"] = job
    return job


def show_explainer(r: Any, state: dict, sid: str) -> None:
    """The panel for replay `r`; `state` is the session's held trace state."""
    c = st.columns([1, 3])
    policy = c[0].selectbox("schedule policy", POLICIES, key="trace.explain_policy",
                            help="fcfs admits in arrival order, as the replay above does; "
                                 "lpm is SGLang's default (slower on long queues)")
    c[1].caption("The explainer runs SGLang's scheduler on the trace (batches, requests in "
                 "flight), at the capacity above, page 1, blocks of 16; the replay above runs "
                 "one request at a time, so a request's hit can differ where requests overlap.")
    key = (r.digest, r.capacity, policy)
    done = state.setdefault("explained", {})
    job = state.get("explain_job")
    if key not in done:
        if _stopped(state, key, "The explainer"):
            return
        if job is None or job.name != f"explain {key}":
            if job is not None:
                job.cancel()
            trace = r.trace
            job = _submit(state, f"explain {key}", lambda progress, cancel: run_explain(
                trace, r.digest, r.capacity, policy, session_id=sid, progress=progress,
                cancel=cancel))
            if job is None:
                return
        if not wait_for(job, "explaining"):
            return
        state["explain_job"] = None
        result = _result(job, "The explainer", state, key)
        if result is None:
            _stopped(state, key, "The explainer")
            return
        done.clear()  # one explanation kept a trace: the budget holds one
        done[key] = result
    _panel(r, done[key], state, sid)


def _panel(r: Any, x: Any, state: dict, sid: str) -> None:
    e = x.explanation
    rates = ", ".join(f"{SIDES[s]} {e.hit_rate(s):.1%}" for s in e.totals)
    say("markdown", f"{rates} of {e.prompt_tokens:,} prompt tokens "
                    f"(explained in {x.seconds:,.1f} s).", bold="Hit rate:")
    st.plotly_chart(bucket_figure(e), key="trace.explain_buckets", config=PLOT)
    st.dataframe(bucket_rows(e), hide_index=True)
    _examples(r, x)
    # issue 22: why the biggest losers missed, each against its best earlier partner
    show_causes(r, list(dict.fromkeys(row.rid for rows in e.top_losers.values() for row in rows)))
    _what_ifs(r, x, state)
    _host_tier(r, state, sid)
    mooncake = r.trace.format == "mooncake"
    for side in e.totals:
        st.caption(f"Prefixes that saved the most: {SIDES[side]}")
        st.dataframe(prefix_rows(e.top_prefixes[side], mooncake), hide_index=True)
        st.caption(f"Requests that lost the most: {SIDES[side]} (reusable tokens prefilled)")
        st.dataframe(loser_rows(e.top_losers[side], side), hide_index=True)
        _step_buttons(r, [(x.rid, f"{x.rid}") for x in e.top_losers[side][:6]], side,
                      f"trace.explain_lost.{side}")


def _step_buttons(r: Any, found: list[tuple[str, str]], side: str, key: str) -> None:
    """One button per request (rid, label) that moves the debugger to its step (step_of)."""
    if not found:
        return
    cols = st.columns(len(found))
    for i, (rid, label) in enumerate(found):
        step = step_of(r, rid, side)
        label += f", step {step:,}" if step is not None else " (not in the replay)"
        cols[i].button(esc_md(label), key=f"{key}.{i}", disabled=step is None, on_click=_go,
                       args=(step or 0, rid if side == "blocks" else None))


def _examples(r: Any, x: Any) -> None:
    """Per bucket that holds tokens, its largest requests and a button to the step of each."""
    say("markdown", "each bucket's largest requests; a button moves the debugger to the "
                    "step where that request was looked up.", bold="Where it happened:")
    for side, buckets in x.examples.items():
        for b, found in buckets.items():
            if not found:
                continue
            st.markdown(esc_md(f"{SIDES[side]}, {BUCKETS[b][0]}:"))
            _step_buttons(r, [(ex.rid, f"{ex.rid}: {tokens(ex.tokens)}") for ex in found],
                          side, f"trace.explain_go.{side}.{b}")


def _what_ifs(r: Any, x: Any, state: dict) -> None:
    e = x.explanation
    if not e.what_if:
        if _stopped(state, x.key, "The what-ifs"):
            return
        job = state.get("explain_job")
        if job is None or job.name != f"what-ifs {x.key}":
            workers = what_if_workers(r.trace, x)
            guess = what_if_estimate(r.trace, x, workers)
            if guess > AUTO_WHAT_IFS_S and not st.button(
                    f"run the what-ifs (about {guess:,.0f} s in {workers} worker processes: "
                    "simulator runs priced from the run above; the progress says the time "
                    "left as measured)", key="trace.explain_whatifs"):
                return
            trace = r.trace
            job = _submit(state, f"what-ifs {x.key}", lambda progress, cancel: run_what_ifs(
                trace, x, progress=progress, cancel=cancel, workers=workers))
            if job is None:
                return
        if not wait_for(job, "what-ifs"):
            return
        state["explain_job"] = None
        if _result(job, "The what-ifs", state, x.key) is None:
            _stopped(state, x.key, "The what-ifs")
            return
    w = e.what_if
    say("markdown", f"{len(w['capacity']) + len(w['page_size']) + 2} what-ifs "
                    f"({x.what_if_seconds or 0:,.1f} s).", bold="What if:")
    st.plotly_chart(capacity_figure(w["capacity"], e.working_set), key="trace.explain_capacity",
                    config=PLOT)
    c = st.columns(2)
    c[0].plotly_chart(page_figure(w["page_size"]), key="trace.explain_pages", config=PLOT)
    c[1].plotly_chart(namespace_figure(w["namespaces"]), key="trace.explain_ns", config=PLOT)


def _host_tier(r: Any, state: dict, sid: str) -> None:
    """`explain --host-ratio`'s section: the trace through SGLang's host tier (HiCache) at the
    capacity above, each prompt split into device hit / host hit / miss, and why each host hit
    was on the host. Runs (a job of its own) only once a host pool is chosen."""
    say("markdown", "SGLang's HiCache keeps evicted KV in a host pool and loads a later hit "
                    "back; requests run one at a time (radix/hosttier/replay.py).",
        bold="Host tier:")
    c = st.columns(2)
    ratio = c[0].selectbox("host pool (x the capacity, --hicache-ratio)",
                           ("off", *(f"{x:g}x" for x in HOST_RATIOS)),
                           key="trace.explain_host")
    policy = c[1].selectbox("write policy", WRITE_POLICIES, key="trace.explain_host_policy")
    if ratio == "off":
        return
    key = (r.digest, r.capacity, ratio, policy)
    what = "The host tier"
    done = state.setdefault("host_explained", {})
    if key not in done:
        if _stopped(state, key, what):
            return
        job = state.get("explain_host_job")
        if job is None or job.name != f"host tier {key}":
            if job is not None:
                job.cancel()
            trace = r.trace
            try:
                job = jobs().submit(f"host tier {key}", lambda progress, cancel: run_host_tier(
                    trace, r.capacity, float(ratio[:-1]), policy, session_id=sid,
                    progress=progress, cancel=cancel))
            except QueueFull as exc:
                say("error", f"The server is busy: {exc}")
                return
            state["explain_host_job"] = job
        if not wait_for(job, "host tier"):
            return
        state["explain_host_job"] = None
        result = _result(job, what, state, key)
        if result is None:
            _stopped(state, key, what)
            return
        done.clear()  # one kept per trace, as the explainer
        done[key] = result
    e = done[key]
    say("markdown", host_summary(e), bold=f"Host {ratio}, {policy}:")
    rows = host_rows(e)
    if rows:
        st.caption("Requests that loaded the most back, and the eviction that had demoted it")
        st.dataframe(rows, hide_index=True)
    else:
        st.caption("No request loaded anything back at this capacity and host pool.")
