"""Eviction lab: DESIGN.md's eviction question under each of the eight policies, beside vLLM."""

from __future__ import annotations

import streamlit as st

import scenarios.eviction as lab
from pages import _hosttier, _hybrid_evict, _tlru
from pages._player import Player, export_panel
from pages._shell import (
    long_caption,
    max_scale,
    min_font_px,
    presenter,
    presenter_fit,
    say,
    tree_height,
)
from radix.runs.costs import LABEL, CostModel
from radix.tree.evict_policy import POLICIES
from viz.blocks import grid_caption
from viz.component import tree_view
from viz.eviction import block_short_line, describe, lab_frame, num_frames
from viz.flavor import flavor_line
from viz.grid_chart import block_grid_chart, folded_line, grid_height
from viz.timeline import Timeline

RAG_PROMPT = 2_624  # S + 2,112
FOLD_ROWS = 2  # presenter mode: runs of this many grid rows alike are drawn as one
STATES = {"the policies disagree (default)": lab.DEFAULT,
          "DESIGN.md's question: all 400 live": lab.DESIGN_QUESTION}


@st.cache_resource(max_entries=16, show_spinner="building 400 conversations and evicting…")
def _run(policy: str, slru: int, state: lab.LabState, to_free: int, tlru: tuple[int, int]):
    run = lab.run_eviction(policy, slru, state, to_free, tlru)
    return run, Timeline(run.log)


@st.cache_resource(max_entries=16, show_spinner="running the eight policies…")
def _table(slru: int, state: lab.LabState, to_free: int, tlru: tuple[int, int]):
    return lab.compare_policies(slru, state, to_free, tlru)


@st.cache_resource(max_entries=16)
def _blocks(state: lab.LabState, to_free: int):
    return lab.run_block_eviction(state, to_free)


LINKED = {"policy": ("eviction.policy", str), "to_free": ("eviction.to_free", int)}
if "eviction.linked" not in st.session_state:  # a deep link sets the settings, once
    st.session_state["eviction.linked"] = True
    for name, (key, cast) in LINKED.items():
        if name in st.query_params:
            try:
                st.session_state[key] = cast(st.query_params[name])
            except ValueError:
                pass
    if st.session_state.get("eviction.policy") not in POLICIES:
        st.session_state.pop("eviction.policy", None)
asked = int(st.session_state.get("eviction.to_free", lab.TO_FREE))  # the widget's value
st.title(f"Eviction lab: {asked:,} tokens must go")
long_caption(f"A 512-token system prompt S is shared by {lab.NUM_CONVERSATIONS} conversations "
             "(S + 24 tokens each; live ones hold a lock). Requests that finished left S + a "
             f"2,112-token RAG context in the cache. The next admission must free {asked:,} "
             "tokens. By default 16 conversations have finished and two requests read the RAG "
             "context (hit_count 2, priority 1), so the policies choose differently.")
c = st.columns([1.6, 1, 0.9, 1.2, 1])
preset = c[0].selectbox("state", list(STATES), key="eviction.preset")
policy = c[1].selectbox("eviction policy", POLICIES, key="eviction.policy")
slru = c[2].number_input("slru threshold", 0, 10, 2, key="eviction.slru",
                         disabled=policy != "slru", help="SLRU's protected_threshold")
live = c[3].slider("live conversations", 0, lab.NUM_CONVERSATIONS, STATES[preset].num_live,
                   key=f"eviction.live.{preset}",
                   help="the oldest others finished (unlocked, still cached)")
to_free = c[4].number_input("tokens to free", 1, 100_000, lab.TO_FREE, step=50,
                            key="eviction.to_free")
state = STATES[preset]._replace(num_live=int(live))
try:
    lab.check_params(policy, int(slru), state, int(to_free))
except ValueError as exc:
    say("error", f"eviction settings: {exc}")
    st.stop()
slru = int(slru) if policy == "slru" else 2
tlru = _tlru.params()  # the T-LRU section's widgets, below
run, tl = _run(policy, slru, state, int(to_free), tlru)
player = Player(f"eviction.{policy}.{slru}.{state}.{int(to_free)}"
                + (f".{tlru}" if policy == "tlru" else ""), num_frames(run),
                page="eviction",
                to_link=lambda i: {"policy": policy, "to_free": str(int(to_free)), "step": str(i)})
player.buttons()
blk = _blocks(state, int(to_free))


def _show(k: int, duration_ms: int) -> None:
    # presenter mode: 345 px and no heading (the policy box and the frame slider say it), so the
    # numbers under the tree stay above the fold at 1280x800 (tests/browser/test_presenter.py)
    height = tree_height(300) if presenter() else 400
    frame = lab_frame(run, tl, k, presenter_fit(0.6, height))  # columns [3, 2]
    if not presenter():
        st.markdown(f"**Radix tree (SGLang), {policy}: frame {frame.k} / "
                    f"{frame.num_frames - 1}**")
    say("info", frame.line)
    long_caption(flavor_line(run.flavor))
    left, right = st.columns([3, 2])
    with left:
        tree_view(frame.scene, key="eviction.tree", height=height,
                  duration_ms=duration_ms, max_scale=max_scale(), min_font_px=min_font_px())
        m = st.columns(3)
        m[0].metric("freed so far", f"{frame.freed:,} tok")
        m[1].metric("evictable", f"{frame.evictable:,} tok")
        m[2].metric("protected", f"{frame.protected:,} tok")
    with right:
        _block_side()


def _block_side() -> None:
    taken = {v.block_id for v in blk.victims}
    # presenter mode: 14 px labels, and runs of rows alike drawn as one (31 rows ran past the
    # fold at 1280x800; tests/browser/test_presenter.py), said under the grid
    px = int(min_font_px())
    fit = {"legend_px": px, "axis_px": px, "fold_rows": FOLD_ROWS} if presenter() else {}
    # keyed ECharts: a settings change redraws the grid in place (a changed plotly figure was
    # a new element, blank for a frame: viz/grid_chart.py)
    grid = block_grid_chart(blk.after, taken=taken, labels=blk.labels,
                            stop_text="vLLM, 16-token blocks: the free queue decides", **fit)
    st.echarts_chart(grid, key="eviction.grid", height=grid_height(grid), renderer="svg")
    folded = folded_line(blk.after, taken=taken, min_rows=FOLD_ROWS) if presenter() else None
    if folded:
        say("caption", folded)
    short = block_short_line(blk)
    if short:
        say("error", short)
    m = st.columns(3)
    # the tokens are the same blocks in other units, not a change: no delta arrow
    m[0].metric("blocks taken", f"{blk.num_needed:,}", f"= {blk.num_needed * 16:,} tokens",
                delta_color="off", delta_arrow="off")
    m[1].metric("cached tokens dropped", f"{blk.cached_tokens_dropped:,}")
    m[2].metric("unreachable after", f"{len(blk.unreachable_after):,}")
    if not presenter():
        st.caption(grid_caption(blk.after, taken=taken))


player.frames(_show)
with export_panel("export frames for slides (animated HTML)", "eviction") as open_:
    if open_:
        player.export(f"eviction-{policy}", lambda k: (lab_frame(run, tl, k).scene,
                                                       lab_frame(run, tl, k).line))

st.caption("Evictable leaves before the call, in the order this policy pops them (first 10):")
st.dataframe([{"leaf": x.name, "tokens": x.num_tokens, "sort key": str(x.sort_key),
               "hits": x.hit_count, "priority": x.priority, "last access": x.last_access_time,
               "created": x.creation_time} for x in run.candidates[:10]], hide_index=True)
st.caption("vLLM's free queue, head first: blocks in the order their ref_cnt last hit 0 (a "
           "request's blocks are freed last-first; blocks without a hash go to the head).")
st.dataframe([{"pos": q.pos, "block": q.block_id, "holds": q.holds,
               "taken": "yes" if q.block_id in {v.block_id for v in blk.victims} else ""}
              for q in blk.queue[:30]], hide_index=True, height=240)

rows = _table(slru, state, int(to_free), tlru)
st.subheader(f"The eight policies, {int(to_free):,} tokens asked")
st.dataframe([{"policy": r.policy, "evicts (pop order)": describe(r.evicted),
               "leaves": len(r.evicted), "freed": f"{r.freed:,} tok",
               "overshoot": f"{r.overshoot:,} tok",
               "S evicted": "yes" if r.system_evicted else "no",
               "RAG repeat reuses": f"{r.rag_repeat_hit:,} tok"} for r in rows], hide_index=True)
choices = {describe(r.evicted) for r in rows}
say("caption", f"{len(choices)} different choice(s) among the eight policies here.")
cost = CostModel()
tree_hit = next(r.rag_repeat_hit for r in rows if r.policy == policy)
st.markdown(
    f"**A repeat of the RAG request** reuses {tree_hit:,} tokens in the tree ({policy}) and "
    f"{blk.rag_repeat_hit:,} in the block cache: it prefills {RAG_PROMPT - tree_hit:,} vs "
    f"{RAG_PROMPT - blk.rag_repeat_hit:,} tokens, "
    f"{1000 * cost.prefill_seconds(RAG_PROMPT - tree_hit):,.1f} ms vs "
    f"{1000 * cost.prefill_seconds(RAG_PROMPT - blk.rag_repeat_hit):,.1f} ms; {LABEL}.")
if state.num_live:
    st.caption("Neither cache can touch S while a conversation holds it: the tree because S is "
               "an interior node with live children (r>0), vLLM because S's blocks have "
               "ref_cnt > 0. The tree frees whole leaves (overshoot); vLLM frees 16-token "
               "blocks from the head of its free queue.")
_hybrid_evict.section()
_tlru.section()
_hosttier.section()
