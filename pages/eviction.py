"""Eviction lab: DESIGN.md's eviction question under each of the seven policies, beside vLLM."""

from __future__ import annotations

import streamlit as st

import viz.eviction_lab as lab
from radix.runs.costs import LABEL, CostModel
from radix.tree.eviction import POLICIES
from viz.component import tree_view
from viz.eviction_lab_blocks import run_block_eviction
from viz.eviction_lab_draw import lab_frame, num_frames
from viz.eviction_lab_grid import grid_figure
from viz.timeline import Timeline

RAG_PROMPT = 2_624  # S + 2,112
SPEEDS = {"slow": 1.5, "normal": 0.8, "fast": 0.3}


@st.cache_resource(max_entries=16)
def _run(policy: str, slru: int, live: int, to_free: int):
    run = lab.run_eviction(policy, slru, live, to_free)
    return run, Timeline(run.log)


@st.cache_data(max_entries=16)
def _table(slru: int, live: int, to_free: int):
    return [row._asdict() for row in lab.compare_policies(slru, live, to_free)]


@st.cache_resource(max_entries=16)
def _blocks(live: int, to_free: int):
    return run_block_eviction(live, to_free)


asked = int(st.session_state.get("eviction.to_free", lab.TO_FREE))  # the widget's value
st.title(f"Eviction lab: {asked:,} tokens must go")
st.caption(f"A 512-token system prompt S is shared by {lab.NUM_CONVERSATIONS} conversations "
           "(S + 24 tokens each; live ones hold a lock). One finished request left S + a "
           f"2,112-token RAG context in the cache. The next admission must free {asked:,} tokens.")
c = st.columns([1.2, 1, 1.2, 1])
policy = c[0].selectbox("eviction policy", POLICIES, key="eviction.policy")
slru = c[1].slider("slru protected_threshold", 0, 10, 2, key="eviction.slru",
                   disabled=policy != "slru")
live = c[2].slider("live conversations", 0, lab.NUM_CONVERSATIONS, lab.NUM_CONVERSATIONS,
                   key="eviction.live", help="the oldest ones finished (unlocked, still cached)")
to_free = c[3].number_input("tokens to free", 1, 100_000, lab.TO_FREE, step=50,
                            key="eviction.to_free")
try:
    lab.check_params(policy, int(slru), int(live), int(to_free))
except ValueError as exc:
    st.error(f"eviction settings: {exc}")
    st.stop()
params = (policy, int(slru) if policy == "slru" else 2, int(live), int(to_free))
if policy in ("lfu", "slru"):
    st.caption("Here every cached leaf was inserted once (hit_count 1), so hit counts do not "
               "split them: LFU, and SLRU at any threshold (all leaves land in one segment), "
               "order the leaves by last access, as LRU does. Hit counts matter when prefixes "
               "are reused: see the Configurations page.")
run, tl = _run(*params)
last = num_frames(run) - 1
if st.session_state.get("eviction.ident") != params:
    st.session_state["eviction.ident"], st.session_state["eviction.k"] = params, 0
    st.session_state["eviction.playing"] = False


def _move(to: str) -> None:
    k = st.session_state["eviction.k"]
    st.session_state["eviction.k"] = {"start": 0, "back": max(k - 1, 0),
                                      "next": min(k + 1, last), "end": last}[to]


def _toggle() -> None:
    st.session_state["eviction.playing"] = not st.session_state["eviction.playing"]
    if st.session_state["eviction.k"] == last:
        st.session_state["eviction.k"] = 0


b = st.columns([1, 1, 1, 1, 1, 2])
for col, name in zip(b, ("start", "back", "next", "end")):
    col.button(name + (" ▶" if name == "next" else ""), on_click=_move, args=(name,),
               key=f"eviction.b_{name}")
b[4].button("pause" if st.session_state["eviction.playing"] else "play", on_click=_toggle,
            key="eviction.b_play")
speed = b[5].select_slider("speed", list(SPEEDS), value="normal", key="eviction.speed",
                           label_visibility="collapsed")


@st.fragment(run_every=SPEEDS[speed] if st.session_state["eviction.playing"] else None)
def _tree() -> None:
    if st.session_state["eviction.playing"]:
        if st.session_state["eviction.k"] >= last:
            st.session_state["eviction.playing"] = False
            st.rerun(scope="app")
        _move("next")
    frame = lab_frame(run, tl, st.session_state["eviction.k"])
    st.markdown(f"**Radix tree (SGLang), {policy}: frame {frame.k} / {last}**")
    st.info(frame.line)
    m = st.columns(3)
    m[0].metric("freed so far (tokens)", f"{frame.freed:,}")
    m[1].metric("evictable (tokens)", f"{frame.evictable:,}")
    m[2].metric("protected (tokens)", f"{frame.protected:,}")
    tree_view(frame.dot, key="eviction.tree", height=430, duration_ms=450)


left, right = st.columns([3, 2])
with left:
    _tree()
    st.caption("Evictable leaves, in the order this policy pops them (first 10):")
    st.dataframe([{"leaf": x.name, "tokens": x.num_tokens, "sort key": str(x.sort_key),
                   "hits": x.hit_count, "last access": x.last_access_time,
                   "created": x.creation_time} for x in run.candidates[:10]], hide_index=True)
with right:
    blk = _blocks(int(live), int(to_free))
    st.markdown("**Block cache (vLLM), 16-token blocks: the free queue decides**")
    m = st.columns(3)
    m[0].metric("blocks taken", f"{blk.num_needed}", f"{blk.num_needed * 16:,} tokens",
                delta_color="off")
    m[1].metric("cached tokens dropped", f"{blk.cached_tokens_dropped:,}")
    m[2].metric("unreachable after", f"{len(blk.unreachable_after)}")
    if blk.num_needed < blk.num_wanted:
        st.error(f"Only {blk.num_needed:,} blocks are free, {blk.num_wanted:,} wanted: vLLM "
                 "cannot admit the request (it would preempt a running one).")
    st.caption("Free queue, head first: blocks in the order their ref_cnt last hit 0 (a "
               "request's blocks are freed last-first; blocks without a hash go to the head).")
    taken = {v.block_id for v in blk.victims}
    st.dataframe([{"pos": q.pos, "block": q.block_id, "holds": q.holds,
                   "taken": "yes" if q.block_id in taken else ""} for q in blk.queue[:30]],
                 hide_index=True, height=300)
    tabs = st.tabs(["pool before", "pool after"])
    tabs[0].plotly_chart(grid_figure(blk.before, blk.labels), key="eviction.grid_before")
    tabs[1].plotly_chart(grid_figure(blk.after, blk.labels, taken), key="eviction.grid_after")

rows = _table(int(slru), int(live), int(to_free))
st.subheader(f"The seven policies, {int(to_free):,} tokens asked")
st.dataframe([{"policy": r["policy"], "evicts (pop order)": r["evicts"], "leaves": r["num_leaves"],
               "freed": r["freed"], "overshoot": r["overshoot"],
               "S evicted": "yes" if r["system_evicted"] else "no",
               "RAG repeat reuses": r["rag_repeat_hit"]} for r in rows], hide_index=True)
cost = CostModel()
tree_hit = next(r["rag_repeat_hit"] for r in rows if r["policy"] == policy)
st.markdown(
    f"**A repeat of the RAG request** reuses {tree_hit:,} tokens in the tree ({policy}) and "
    f"{blk.rag_repeat_hit:,} in the block cache: it prefills {RAG_PROMPT - tree_hit:,} vs "
    f"{RAG_PROMPT - blk.rag_repeat_hit:,} tokens, "
    f"{1000 * cost.prefill_seconds(RAG_PROMPT - tree_hit):,.1f} ms vs "
    f"{1000 * cost.prefill_seconds(RAG_PROMPT - blk.rag_repeat_hit):,.1f} ms; {LABEL}.")
st.caption("Neither cache can touch S while a conversation holds it: the tree because S is an "
           "interior node with live children (r>0), vLLM because S's blocks have ref_cnt > 0. "
           "The tree frees whole leaves (overshoot); vLLM frees 16-token blocks from the tail of "
           "the RAG chain, so no block is left unreachable.")
