"""The words of a hybrid model's caches, with the numbers: why SGLang's component tree cut a hit
("attention matched 1,900 tokens; no Mamba state at 1,900: the hit is cut to 1,600, the last
checkpoint (node #2)"), what a scheduler phase changed on the tree (states kept and stored,
windows freed, tombstones), and how vLLM's KV-cache groups agreed ("full attention 1,152, each
Mamba group 0: the intersection gives 0"). Built from events and snapshots only (the match's
HybridPrefixMatched, the phase's component events; vLLM's lookup record), never from a cache.
Leaves out: the pictures (viz/hybrid.py, viz/group_grid.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radix import events as ev
from viz.hybrid import spans, walk_path

LABELS = {"llama-3-8b": "Llama-3-8B", "qwen3.5-4b": "Qwen3.5-4B", "gpt-oss-20b": "gpt-oss-20b",
          "gemma-3-27b": "Gemma-3-27B", "qwen3-next-80b-a3b": "Qwen3-Next-80B-A3B",
          "nemotron-h-8b": "Nemotron-H-8B"}
KINDS = {"full_attention": "full attention", "sliding_window": "sliding window",
         "mamba": "Mamba", "intersection": "the intersection"}
ENGINES = {"sglang": "SGLang 0.5.23", "vllm": "vLLM 0.33"}


def model_label(preset: str) -> str:
    return LABELS.get(preset, preset)


def _live_window(nodes: Sequence[Any], path: Sequence[int]) -> int:
    """SWA tokens still held right behind the end of `path`, back to the first tombstone."""
    by_id = {n.id: n for n in nodes}
    live = 0
    for nid in reversed(path):
        n = by_id[nid]
        if n.swa_slot_ids is None:
            break
        live += len(n.token_ids)
    return live


def cut_reasons(info: Any, nodes: Sequence[Any], token_ids: Sequence[int], full: int) -> list[str]:
    """Why the components did not accept the node where full attention stopped.

    >>> from types import SimpleNamespace as N
    >>> info = N(components=("full", "mamba"), window=None)
    >>> t = [N(id=0, parent=None, token_ids=(), mamba_slot_ids=None),
    ...      N(id=2, parent=0, token_ids=(1, 2), mamba_slot_ids=None)]
    >>> cut_reasons(info, t, [1, 2, 3], 2)
    ['no Mamba state at 2 (node #2 is a Mamba tombstone)']
    """
    path = walk_path(nodes, token_ids, full)
    if not path:
        return []
    last = next(n for n in nodes if n.id == path[-1])
    out = []
    if "mamba" in info.components and last.mamba_slot_ids is None:
        out.append(f"no Mamba state at {full:,} (node #{last.id} is a Mamba tombstone)")
    if "swa" in info.components:
        live = _live_window(nodes, path)
        if live == 0:
            out.append(f"the {info.window:,}-token window behind {full:,} is an SWA tombstone")
        elif live < info.window:
            out.append(f"only {live:,} of the {info.window:,} window tokens behind {full:,} "
                       "are live (an SWA tombstone before them)")
    return out


def match_line(label: str, info: Any, rid: str, matched: ev.HybridPrefixMatched,
               nodes: Sequence[Any], token_ids: Sequence[int]) -> str:
    """The match on one model's tree (SGLang), with the numbers; `nodes`: the tree after it."""
    full, hit = matched.full_kv_hit_length, matched.prefix_len
    if full == 0:
        return f"{label}: nothing cached starts {rid}'s prompt: the hit is 0."
    if hit >= full:
        return f"{label}: attention matched {full:,} tokens and every component accepts: " \
               f"the hit is {hit:,}."
    reasons = cut_reasons(info, nodes, token_ids, full) or ["a component refused"]
    where = f"the hit is cut to {hit:,}"
    if hit and "mamba" in info.components:
        where += f", the last checkpoint (node #{matched.node_ids[-1]})"
    out = f"{label}: attention matched {full:,} tokens; {'; '.join(reasons)}: {where}."
    if matched.mamba_branching_seqlen:
        out += (f" The match asks {rid} to keep a state at {matched.mamba_branching_seqlen:,} "
                "(mamba_branching_seqlen).")
    elif matched.swa_branching_seqlen and "mamba" not in info.components:
        out += (f" The match asks {rid} to insert up to {matched.swa_branching_seqlen:,} with "
                "its window (swa_branching_seqlen).")
    return out


def change_words(events: Sequence[ev.Event], nodes: Sequence[Any]) -> list[str]:
    """What a phase did, in its order: requests' states kept and windows freed, nodes inserted
    or split, components stored or tombstoned (positions from the tree after it, `nodes`)."""
    at = spans(nodes)
    out = []
    for e in events:
        if isinstance(e, ev.MambaStateTracked):
            out.append(f"a Mamba state kept at {e.seqlen:,}")
        elif isinstance(e, ev.MambaStateCopied):
            out.append(f"node #{e.node_id}'s state copied into the request's own slot "
                       "(copy on write)")
        elif isinstance(e, ev.SlidingWindowFreed):
            out.append(f"SWA slots {e.start:,}..{e.end:,} freed (out of the window)")
        elif isinstance(e, ev.NodeSplit) and e.new_node_id in at:
            cut = at[e.new_node_id][1]
            out.append(f"node #{e.node_id} split at {cut:,} (new #{e.new_node_id})")
        elif isinstance(e, ev.NodeInserted) and e.node_id in at:
            start, end = at[e.node_id]
            out.append(f"node #{e.node_id} inserted ({start:,}..{end:,})")
        elif isinstance(e, ev.ComponentStored) and e.node_id in at:
            end = at[e.node_id][1]
            out.append(f"a Mamba state stored on node #{e.node_id} at {end:,}"
                       if e.component == "mamba" else
                       f"node #{e.node_id}'s window {'recovered' if e.recovered else 'stored'}")
        elif isinstance(e, ev.ComponentTombstoned):
            out.append(f"node #{e.node_id}'s {e.component} tombstoned ({e.cause})")
    return out


def lock_words(events: Sequence[ev.Event]) -> str:
    """An admission's lock walk in one clause: how many nodes each component locked."""
    full = sum(1 for e in events if isinstance(e, ev.LockChanged) and e.delta > 0)
    aux: dict[str, int] = {}
    for e in events:
        if isinstance(e, ev.ComponentLockChanged) and e.delta > 0:
            aux[e.component] = aux.get(e.component, 0) + 1
    if not full and not aux:
        return "nothing to lock: the hit is the root"
    parts = [f"{c} on {_nodes(k)}" for c, k in (("full", full), *aux.items())]
    return "locks the hit's path: " + ", ".join(parts)


def _nodes(k: int) -> str:
    return f"{k} node" + ("" if k == 1 else "s")


def phase_line(label: str, rid: str, phase: str, events: Sequence[ev.Event],
               nodes: Sequence[Any]) -> str:
    """One model's sentence for a frame after its match: admit (the lock walk), prefill (the
    first token: a checkpoint inserts), finish (the second token, the insert, the unlock)."""
    if phase == "admit":
        return f"{label}: {rid} is admitted and {lock_words(events)}."
    what = {"prefill": f"{rid}'s prefill and first token",
            "finish": f"{rid}'s second token and finish"}[phase]
    parts = change_words(events, nodes)
    if phase == "finish":
        parts.append("its locks released")
    return f"{label}: {what}: " + ("; ".join(parts) or "the tree is unchanged") + "."


def vllm_line(info: Any, lookup: Any) -> str:
    """vLLM's lookup on a model's groups, with the intersection and the junction.

    >>> from types import SimpleNamespace as N
    >>> info = N(preset="qwen3.5-4b", block_size=576, kinds=("mamba",) * 3 + ("full_attention",))
    >>> look = N(rid="R2", hit_tokens=0, group_hits=(0, 0, 0, 1152),
    ...          num_uncached_common_prefix_tokens=1152, shared_prefix_boundary=1152)
    >>> print(vllm_line(info, look))
    vLLM, Qwen3.5-4B (block 576): full attention 1,152, each Mamba group 0: the intersection \
gives 0; 1,152 common tokens are not cached in every group: the junction is pinned at 1,152 \
(R2's first chunk ends there, so every group caches that point).
    """
    head = f"vLLM, {model_label(info.preset)} (block {info.block_size:,})"
    if len(info.kinds) == 1:
        return f"{head}: {lookup.hit_tokens:,} tokens hit."
    by_kind: dict[str, set[int]] = {}
    for kind, h in zip(info.kinds, lookup.group_hits):
        by_kind.setdefault(kind, set()).add(h)
    parts = []
    for kind in sorted(by_kind, key=lambda k: k != "full_attention"):
        hits, many = by_kind[kind], info.kinds.count(kind) > 1
        word = (f"each {KINDS[kind]} group" if many and len(hits) == 1 else KINDS[kind])
        parts.append(f"{word} {', '.join(f'{h:,}' for h in sorted(hits))}")
    out = f"{head}: {', '.join(parts)}: the intersection gives {lookup.hit_tokens:,}"
    if lookup.shared_prefix_boundary:
        out += (f"; {lookup.num_uncached_common_prefix_tokens:,} common tokens are not cached "
                f"in every group: the junction is pinned at {lookup.shared_prefix_boundary:,} "
                f"({lookup.rid}'s first chunk ends there, so every group caches that point)")
    return out + "."


def frame_lines(walk: Any, i: int) -> list[str]:
    """Frame i of a hybrid walk (scenarios/hybrid_tour.py) in words: one sentence per model."""
    f = walk.frames[i]
    if f.request < 0:
        return ["Both models' caches are empty. Four requests of 2,200 tokens come one after "
                "the other: R1, R2 and R3 share a 1,600-token prefix; R4 shares R1's first "
                "1,900 tokens."]
    rid, prompt = walk.rids[f.request], walk.prompts[f.request]
    out = []
    for info, side in zip(walk.models, f.sides):
        label = model_label(info.preset)
        if f.phase != "match":
            out.append(phase_line(label, rid, f.phase, side.events, side.nodes))
            continue
        matched = next(e for e in side.events if isinstance(e, ev.HybridPrefixMatched))
        line = match_line(label, info, rid, matched, side.nodes, prompt)
        if any(isinstance(e, ev.MambaStateCopied) for e in side.events):
            line += f" The state is copied into {rid}'s own slot (copy on write)."
        out.append(line)
    return out


def totals_rows(totals: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """Each engine's figures over a trace (radix.runs.hybrid_compare's run_side), one row:
    hit rate, hit and prefilled tokens, what full attention alone would have hit, the tokens
    each kind of layer cut from it.

    >>> t = {"engine": "vllm", "requests": 2, "rejected": 0, "hit_rate": 0.25, "hit_tokens": 5,
    ...      "prefilled_tokens": 15, "attention_hit_tokens": 9, "cut": {"mamba": 4}}
    >>> totals_rows({"vllm": t})[0]["cut from attention's hit"]
    'Mamba 4'
    """
    rows = []
    for engine, t in totals.items():
        cut = ", ".join(f"{KINDS.get(k, k)} {v:,}" for k, v in t["cut"].items())
        rows.append({"engine": ENGINES.get(engine, engine),
                     "requests (rejected)": f"{t['requests']:,} ({t['rejected']:,})",
                     "hit rate": f"{t['hit_rate']:.1%}", "hit tokens": f"{t['hit_tokens']:,}",
                     "prefilled": f"{t['prefilled_tokens']:,}",
                     "full attention alone would hit": f"{t['attention_hit_tokens']:,}",
                     "cut from attention's hit": cut or "-"})
    return rows


def outcome_line(engine: str, o: Any) -> str:
    """One request's outcome on one engine (radix.runs.hybrid's Outcome), in words.

    >>> from types import SimpleNamespace as N
    >>> o = N(rejected=False, prompt_tokens=2200, hit=0, attention_hit=1152, cut_by="mamba")
    >>> outcome_line("vllm", o)
    'vLLM 0.33: 0 of 2,200 prompt tokens hit; full attention alone matched 1,152 (cut by Mamba).'
    """
    name = ENGINES.get(engine, engine)
    if o.rejected:
        return f"{name}: rejected (too big for the pools), {o.prompt_tokens:,} prompt tokens."
    out = f"{name}: {o.hit:,} of {o.prompt_tokens:,} prompt tokens hit"
    if o.attention_hit > o.hit:
        by = KINDS.get(o.cut_by, o.cut_by) if o.cut_by else "another group"
        out += f"; full attention alone matched {o.attention_hit:,} (cut by {by})"
    return out + "."
