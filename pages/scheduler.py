"""Scheduler: the waiting queue under each schedule policy; the cold burst of 64, round by round."""

from __future__ import annotations

import streamlit as st

from pages._downloads import Item, show_item
from pages._player import PLOTLY_JS_BYTES
from pages._shell import (
    long_caption,
    max_scale,
    min_font_px,
    presenter,
    presenter_fit,
    say,
)
from radix.runs.costs import LABEL, CostModel
from scenarios.scheduler import (
    FALLBACK_LEN,
    NUM_REQUESTS,
    POLICIES,
    PREFIX_LEN,
    SUFFIX_LEN,
    burst_cases,
    check_queue_params,
    run_burst,
    sort_queue,
)
from viz.blocks import request_chain
from viz.component import tree_view
from viz.grid_chart import block_grid_chart, grid_height
from viz.scheduler import burst_figure, match_scene, queue_figure

PRESENTER_TREE_PX = 405


@st.cache_resource(max_entries=16, show_spinner="sorting the waiting queue…")
def _sort(policy: str, n: int, check: int, depri: int):
    return sort_queue(policy, n, check, depri)


st.title("Scheduler: who goes first, and what it costs")
if not presenter():  # on a projector the tree and the pool must stay above the fold
    st.header("1. One sort of the waiting queue")
long_caption("A warm tree (S + few-shot F, four users' histories) and a queue mixing warm "
             "requests, cold ones sharing a 2,000-token document, cold ones sharing 20 tokens, "
             "and unique ones. SGLang's SchedulePolicy sorts it once; a cross marks a "
             "deprioritized request.")
c = st.columns([1.1, 1.3, 1.2, 1.2, 1.1])
policy = c[0].selectbox("schedule policy", POLICIES, key="scheduler.policy")
n = c[1].slider("waiting requests", 4, 200, 24, key="scheduler.n",
                help=f"LPM falls back to FCFS past {FALLBACK_LEN}")
check = c[2].slider("in-batch check threshold", -1, 256, 32, key="scheduler.check",
                    help="requests whose cached match is <= this are checked (-1: off)")
depri = c[3].slider("deprioritize threshold", 1, 256, 32, key="scheduler.depri",
                    help="checked requests sharing >= this many tokens with an earlier one wait")
try:
    check_queue_params(policy, int(n), int(check), int(depri))
except ValueError as exc:
    say("error", f"queue settings: {exc}")
    st.stop()
sort = _sort(policy, int(n), int(check), int(depri))
if sort.notice:
    st.warning(f"{sort.notice}. SGLang does this silently: with more than {FALLBACK_LEN} "
               "requests waiting, LPM stops matching and the queue stays in arrival order.",
               icon="⚠️")
depr = [r for r in sort.rows if r.deprioritized]
m = st.columns(4)
m[0].metric("policy that ran", sort.active_policy)
m[1].metric("waiting", f"{len(sort.rows):,}")
m[2].metric("deprioritized", f"{len(depr):,}")
m[3].metric("first offered", min(sort.rows, key=lambda r: r.after).rid)
order = sorted(sort.rows, key=lambda r: r.after)
settings = (policy, int(n), int(check), int(depri))
if st.session_state.get("scheduler.show_for") != settings:  # a new sort: its first offered
    # (a kept pick showed the old policy's match after a switch, issue 41 item 10)
    st.session_state["scheduler.show_for"] = settings
    st.session_state["scheduler.show"] = order[0].rid
shown = c[4].selectbox("request whose match to show", [r.rid for r in order], key="scheduler.show",
                     help="the first offered by default: the tree path it matched, and its "
                          "block chain")
left, right = st.columns([3, 2])
with left:
    st.markdown(f"**The tree the sort matched against: {shown}'s match in blue**")
    # presenter: a match three levels deep and its fold stubs at 14 px labels, (244 + 16) x
    # 14 / 9 = 404.4 px tall (tests/viz/test_viz_presenter_fold.py); still above the fold
    height = PRESENTER_TREE_PX if presenter() else 300
    tree_view(match_scene(sort.tree, sort.prompts[shown], presenter_fit(0.6, height)),
              key="scheduler.tree", height=height, max_scale=max_scale(),
              min_font_px=min_font_px())
with right:
    chain = [lk.block_id for lk in request_chain(sort.blocks, sort.prompts[shown]) if lk.block_id]
    # keyed ECharts: another request shown redraws the grid in place (viz/grid_chart.py)
    grid = block_grid_chart(sort.blocks, columns=32, chain_ids=chain,
                            stop_text=f"vLLM's pool, same warm requests: {shown}'s cached "
                                      "chain outlined")
    st.echarts_chart(grid, key="scheduler.blocks", height=grid_height(grid), renderer="svg")
figure = queue_figure(sort)
st.plotly_chart(figure, key="scheduler.queue_chart", config={"displaylogo": False})
show_item(Item("scheduler.export", f"radixlens-queue-{policy}-{int(n)}.html",
               PLOTLY_JS_BYTES + len(figure.to_json()), False,
               lambda out, *_: out.write(figure.to_html(include_plotlyjs=True,
                                                        auto_play=True).encode()),
               (policy, int(n), hash(figure.to_json())),
               label="the queue's before → after as animated HTML (slides)"))
st.dataframe([{"rid": r.rid, "kind": r.kind, "before": r.before, "after": r.after,
               "moved": r.before - r.after, "cached match": r.prefix_len,
               "in-batch match": r.in_batch_len, "deprioritized": "yes" if r.deprioritized else "",
               "max_new_tokens": r.max_new_tokens, "why": r.reason}
              for r in sorted(sort.rows, key=lambda r: r.after)], hide_index=True, height=320)
if depr:
    st.caption(f"Deprioritized: {', '.join(r.rid for r in depr[:12])}"
               f"{' …' if len(depr) > 12 else ''}. {depr[0].reason}.")

st.header(f"2. The cold burst: {NUM_REQUESTS} requests, one cold {PREFIX_LEN:,}-token prefix")
long_caption("All arrive at once; nothing is cached. The real scheduler loop "
             "(radix/sched/scheduler.py) runs with the cost model instead of a model. "
             "Deprioritizing only reorders the queue: admission still walks it until the "
             "round's input budget (max_prefill_tokens) is spent.")


@st.cache_data(show_spinner="running the cold burst through the scheduler loop, three ways…")
def _cases():
    return burst_cases()


runs = _cases()
cost = CostModel()
st.dataframe([{"run": r.label, "prefill rounds": len(r.rounds),
               "round 1 admits": r.rounds[0].num_requests,
               "deprioritized in round 1": r.deprioritized_first_round,
               "of those admitted anyway": r.admitted_deprioritized,
               "prefix tokens prefilled": r.prefix_prefilled, "duplicate prefills": r.duplicates,
               "all tokens prefilled": r.tokens_prefilled,
               "prefill s (derived)": round(r.prefill_seconds, 2)} for r in runs], hide_index=True)
fcfs, one, lpm = runs
saved = fcfs.prefix_prefilled - one.prefix_prefilled
prompt, k = PREFIX_LEN + SUFFIX_LEN, lpm.rounds[0].num_requests
st.markdown(
    f"- **No budget, FCFS:** all {fcfs.rounds[0].num_requests} in round one, the prefix "
    f"prefilled {fcfs.prefix_prefilled // PREFIX_LEN} times: **{fcfs.prefix_prefilled:,}** "
    f"tokens.\n- **One request per round:** the prefix once (**{one.prefix_prefilled:,}**); "
    f"the other 63 hit it. Saved {saved:,} tokens = {cost.prefill_seconds(saved):.1f} s of "
    f"prefill.\n- **LPM, budget 16,384:** the in-batch check deprioritizes "
    f"**{lpm.deprioritized_first_round}**, yet round one admits **{lpm.rounds[0].num_requests}** "
    f"({lpm.duplicates} duplicates, {lpm.prefix_prefilled:,} prefix tokens): {k} x {prompt:,} = "
    f"{k * prompt:,} fit the budget, the next needs {prompt:,} with {lpm.budget - k * prompt:,} "
    "left.")
st.caption(f"Seconds: {LABEL}.")
st.plotly_chart(burst_figure(runs), key="scheduler.burst_chart", config={"displaylogo": False})

st.subheader("Rounds of one run")
pick = st.columns([2, 1, 1])
which = pick[0].selectbox("run", [r.label for r in runs] + ["my own budget"],
                          index=2, key="scheduler.burst_run")
own_policy = pick[1].selectbox("policy", ("lpm", "fcfs"), key="scheduler.burst_policy",
                               disabled=which != "my own budget")
budget = pick[2].number_input("max_prefill_tokens", 1, 10**9, 8_192, step=1_024,
                              key="scheduler.burst_budget", disabled=which != "my own budget")
run = next((r for r in runs if r.label == which), None) or run_burst(own_policy, int(budget))
st.dataframe([{"round": r.round, "requests": r.num_requests, "rids": r.rids,
               "prefix prefilled": r.prefix_prefilled, "prefix reused": r.prefix_reused,
               "tokens prefilled": r.tokens_prefilled, "ms (derived)": round(1000 * r.seconds, 1)}
              for r in run.rounds], hide_index=True)
st.caption(f"{run.label}: {run.prefix_prefilled:,} prefix tokens prefilled "
           f"({run.duplicates} duplicate prefills), then {run.num_decode_steps} decode steps.")
