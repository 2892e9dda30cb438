"""The Live engine page's pictures and words: the table, its totals, the folded tree, the
lines of what the engine did, and where each waiting request stands.

Measured columns come from the engine's metrics (radix/sched/scheduler.py): matched and
prefilled tokens, TTFT, decode tokens/s on this machine's model. Derived columns price the matched
tokens for Llama-3-8B on an H100 (radix/runs/costs.py): the prefill a hit saves there, and its KV
bytes. Reads scenarios.live's session records (duck-typed).
Leaves out: block-cache numbers in the table (the grid beside the tree shows the blocks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from radix import events as ev
from radix.runs.costs import CostModel
from viz.scene import fit_tree_scene, tree_scene
from viz.words import narrate, split_line, tokens, who

COLUMNS = ("request", "cache", "status", "prompt tokens", "matched", "prefilled",
           "TTFT ms (measured)", "decode tok/s (measured)", "output tokens",
           "saved prefill ms (derived)", "saved KV MiB (derived)")


def request_rows(requests: list[Any], cost: CostModel | None = None,
                 admitted: dict[str, tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """One row per request, newest first. A running request shows its match from `admitted`
    (rid -> (matched, to prefill), as the scheduler admitted it); timings once it finishes.

    A finished request that matched 2,055 tokens saves 2,055 / 22,036 tok/s = 93.3 ms of H100
    prefill and 2,055 x 131,072 B = 256.9 MiB of KV (derived for Llama-3-8B).
    """
    cost = cost or CostModel()
    rows = []
    for r in reversed(requests):
        m = r.metrics
        status = "done" if m is not None else (f"error: {r.error}" if r.error else "running")
        row = dict.fromkeys(COLUMNS)
        row.update({"request": r.rid, "cache": "on" if r.cache_on else "off", "status": status,
                    "prompt tokens": r.prompt_len, "output tokens": len(r.output_ids)})
        if m is not None:
            matched = int(m.get("matched_tokens", 0))
            row.update({
                "matched": matched, "prefilled": int(m.get("prefilled_tokens", 0)),
                "TTFT ms (measured)": round(m["ttft"] * 1000, 1),
                "decode tok/s (measured)": round(m.get("decode_tps", 0.0), 1),
                "saved prefill ms (derived)": round(cost.prefill_seconds(matched) * 1000, 1),
                "saved KV MiB (derived)": round(cost.kv_bytes(matched) / 2**20, 1),
            })
        if m is None and r.rid in (admitted or {}):
            row["matched"], row["prefilled"] = admitted[r.rid]
        rows.append(row)
    return rows


class Totals(NamedTuple):
    finished: int  # requests done
    matched: int  # prompt tokens served from the tree
    prefilled: int  # prompt tokens computed
    hit_rate: float  # matched / (matched + prefilled); 0 with nothing finished
    saved_prefill_ms: float  # derived: matched tokens at the H100 prefill rate


def totals(requests: list[Any], cost: CostModel | None = None) -> Totals:
    """Sums over finished requests: matched 300 + prefilled 100 -> hit rate 0.75."""
    cost = cost or CostModel()
    done = [r.metrics for r in requests if r.metrics is not None]
    matched = sum(int(m.get("matched_tokens", 0)) for m in done)
    prefilled = sum(int(m.get("prefilled_tokens", 0)) for m in done)
    rate = matched / (matched + prefilled) if matched + prefilled else 0.0
    return Totals(len(done), matched, prefilled, rate, cost.prefill_seconds(matched) * 1000)


def measured_label(loaded: Any) -> str:
    """'measured: SmolLM2-135M-Instruct, CPU fp32' for the default model on CPU."""
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    dtype = str(loaded.dtype).removeprefix("torch.")
    return f"measured: {loaded.name}, {loaded.device.type.upper()} {short.get(dtype, dtype)}"


def live_scene(snapshot: Any, decode: Callable[[list[int]], str] | None, selected: int | None,
               max_children: int = 12, fit: tuple[float, float, float] | None = None,
               keep: Iterable[int] = ()) -> tuple[dict[str, Any], int, int]:
    """(scene, nodes drawn, nodes folded): at most `max_children` children per node, the selected
    node (outlined) and locked ones (running requests) first. A root with 20 leaves, 12 per
    node: 1 + 12 drawn, 8 folded into one "+8 more" box. `fit` (presenter mode: view width and
    height, smallest label, in px): folded further until every label keeps that size
    (viz/scene.py's fit_tree_scene); `keep`: nodes the last line names, never folded."""
    highlight = {selected: "selected"} if selected is not None else None
    present = {n.id for n in snapshot.nodes}
    items = {"decode": decode, "highlight": highlight, "max_children": max_children,
             "keep": sorted(set(keep) & present)}
    scene = (tree_scene(snapshot, **items) if fit is None
             else fit_tree_scene(snapshot, *fit, **items))
    drawn = sum(1 for n in scene["nodes"] if n["id"].startswith("n"))  # not the "m" stubs
    return scene, drawn, len(snapshot.nodes) - drawn


def told_lines(told: list[Any], owners: Mapping[int, str], now: float | None = None
               ) -> list[str]:
    """Each told record as '2.5 s ago: <line>', oldest first."""
    now = time.time() if now is None else now
    return [f"{max(now - t.wall_time, 0.0):.1f} s ago: {told_line(t, owners)}" for t in told]


def progress_line(p: Any, rate: float | None) -> tuple[float, str]:
    """(fraction for a progress bar, words) for one unfinished request; `rate` is the measured
    prefill rate (tokens/s) used to estimate the wait.

    Prefilling 512 of 1,024 with 1,000 tokens ahead at 500 tok/s: 0.5, and ~3.0 s left
    ((1,000 + 512) / 500).
    """
    eta = ""
    if p.stage in ("waiting", "prefill") and rate:
        left = p.ahead_tokens + (p.total - p.done)
        eta = f"; ~{left / rate:,.1f} s at the measured {rate:,.0f} prompt tokens/s"
    ahead = (f"{p.ahead:,} request(s) ahead with {p.ahead_tokens:,} prompt tokens to prefill"
             if p.ahead else "nothing ahead of it")
    if p.stage == "waiting":
        return 0.0, f"{p.rid}: waiting to be admitted ({p.total:,} prompt tokens); {ahead}{eta}"
    if p.stage == "prefill":
        frac = p.done / p.total if p.total else 1.0
        return frac, (f"{p.rid}: prefilled {p.done:,} of {p.total:,} tokens (the rest came from "
                      f"the tree); {ahead}{eta}")
    frac = p.done / p.total if p.total else 1.0
    return frac, f"{p.rid}: decoding, {p.done:,} of {p.total:,} new tokens"


def lock_walk_line(rid: str | None, hops: Sequence[ev.LockChanged]) -> str:
    """A whole lock walk in one line, for the Live page.

    >>> lock_walk_line("turn5.5", [ev.LockChanged(9, 1, 1, 40), ev.LockChanged(4, 2, 1, 0)])
    'turn5.5 locks #9 → #4, 2 hops up to the root: lock_ref 1, 2; 40 tokens now protected'
    """
    verb, dst = ("locks", "protected") if hops[0].delta > 0 else ("unlocks", "evictable")
    path = " → ".join(f"#{h.node_id}" for h in hops)  # one arrow everywhere (markdown makes
    # "->" one in an alert, not in plain text: the Live page showed both, issue 41 item 7)
    refs = ", ".join(str(h.lock_ref) for h in hops)
    moved = sum(h.size_moved for h in hops)
    tail = f"; {tokens(moved)} now {dst}" if moved else ""
    n = len(hops)
    return (f"{who(rid)} {verb} {path}, {n} hop{'s' if n != 1 else ''} up to the root: "
            f"lock_ref {refs}{tail}")


def told_line(told: Any, owners: Mapping[int, str]) -> str:
    """One Live-page line for a `scenarios.live.Told` record."""
    e = told.event
    if isinstance(e, tuple):  # a lock walk
        return lock_walk_line(told.rid, e)
    who = told.rid or "the scheduler's match"
    if isinstance(e, ev.NodeSplit):
        return split_line(e, told.before, owners, who, told.key_len)
    return narrate(e, None, owners, who)
