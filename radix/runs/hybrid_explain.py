"""Why a trace's hit rate on a hybrid model is what it is: every prompt token in one bucket per
engine (HYBRID_BUCKETS, adding up to the prompt) and, in words, which checkpoint or block decided
each request. Beside each engine's run (hybrid_compare.run_side) a prefix trie holds what ran
before and what the engine stored; a prompt splits at nested lengths (`split`): first seen,
other namespace, last token, block floor / rounding, never stored, evicted, then what the other
layers held back (no Mamba state there, outside the window, the intersection), then the hit.
Leaves out: batching (the simulator's in-flight bucket), retraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from radix.models.engines import EngineAssumptions
from radix.models.preset import ModelPreset
from radix.request import Req
from radix.runs.hybrid import MAMBA, SWA, Outcome
from radix.runs.hybrid_compare import prompt_lens, run_side
from radix.runs.probe import namespace
from radix.runs.progress import Progress
from radix.tokens import joined
from radix.tokens.runs import PrefixTrie
from radix.traces.trace import Trace, TraceRequest, output_tokens

HYBRID_BUCKETS = ("hit", "evicted", "last_token_cap", "block_rounding", "block_floor",
                  "not_stored", "mamba_checkpoint", "sliding_window", "intersection",
                  "other_namespace", "first_seen", "rejected")
CUT_BUCKET = {MAMBA: "mamba_checkpoint", SWA: "sliding_window", "intersection": "intersection"}
ANY = "any namespace"  # the trie root every request also goes under


class HybridRow(NamedTuple):
    """One request on one engine."""

    rid: str
    index: int  # place in the trace
    buckets: dict[str, int]  # HYBRID_BUCKETS -> tokens, adding up to the prompt
    outcome: Outcome
    decided: str  # which checkpoint or block decided the hit, in words


def split(o: Outcome, shared: int, seen_any: int, stored: int | None = None) -> dict[str, int]:
    """The prompt's buckets, from what the engine saw (`o`), what ran before in the same
    namespace (`shared` tokens from the start), in any namespace (`seen_any`) and what the
    engine stored of it (`stored`, default `shared`).

    vLLM at block 576 (Qwen3.5), request 2 of 1,600 shared + 600 own: shared 1,600, attention
    matched 1,152 (2 blocks), no Mamba state: the 448 past the last block are block rounding,
    the 1,152 the Mamba checkpoint's, 600 first seen.
    >>> o = Outcome("r1", 2200, 0, False, 1152, 0, "mamba", 576, 1152, 1152)
    >>> b = split(o, 1600, 1600); b["mamba_checkpoint"], b["block_rounding"], b["first_seen"]
    (1152, 448, 600)
    """
    n = o.prompt_tokens
    out = dict.fromkeys(HYBRID_BUCKETS, 0)
    if o.rejected:
        out["rejected"] = n
        return out
    seen_any = max(seen_any, shared)
    capped = min(shared, n - 1)
    aligned = capped // o.unit * o.unit
    out["first_seen"] = n - seen_any
    out["other_namespace"] = seen_any - shared
    out["last_token_cap"] = shared - capped
    out["block_floor" if aligned == 0 else "block_rounding"] = capped - aligned
    kept = aligned if stored is None else min(min(stored, n - 1) // o.unit * o.unit, aligned)
    out["not_stored"] = aligned - kept
    attention = min(o.attention_hit, kept)  # subtle: never more than was there to hit
    cut_at = max(min(o.cut_at, attention), o.hit)
    out["evicted"] = kept - attention
    if o.cut_by is not None:
        out[CUT_BUCKET.get(o.cut_by, "intersection")] += attention - cut_at
    out["intersection"] += cut_at - o.hit
    out["hit"] = o.hit
    return out


def decided(engine: str, o: Outcome, b: dict[str, int]) -> str:
    """Which checkpoint or block decided the hit, in words (`b`: its buckets, from split).

    >>> o = Outcome("r2", 2200, 1152, False, 1152, 1152, None, 576, 0, 0, grid=576)
    >>> for part in decided("vllm", o, split(o, 1600, 1600)).split(", "): print(part)
    hit 1,152: the Mamba state cached at token 1,152 (the end of block 2 of 576 tokens)
    and the attention blocks before it
    """
    unit = o.unit
    if o.rejected:
        return "rejected: the request does not fit the pools"
    if o.hit == 0 and b["block_floor"]:
        return (f"the {b['block_floor']:,} reusable tokens fill no {unit}-token "
                f"{'block' if engine == 'vllm' else 'page'}: a shared prefix shorter than "
                "the hybrid block never hits")
    parts = [_head(engine, o), *_cut(engine, o)]
    if b["not_stored"]:
        parts.append(f"{b['not_stored']:,} reusable tokens were never stored (the tree takes a "
                     "request only as far as its last Mamba state)")
    if b["evicted"]:
        parts.append(f"{b['evicted']:,} reusable tokens were evicted")
    if engine == "vllm" and o.uncached_common:
        parts.append(f"num_uncached_common_prefix_tokens {o.uncached_common:,} pins the "
                     f"junction at {o.junction:,}: what this request computes there is cached for "
                     "the next")
    elif engine == "sglang" and o.junction > o.hit and o.keeps_branch:
        parts.append(f"mamba_branching_seqlen {o.junction:,}: this request keeps a state "
                     "there for the next")
    return "; ".join(parts)


def _head(engine: str, o: Outcome) -> str:
    """The hit and where it ends: vLLM's state and block, SGLang's node."""
    unit = o.unit
    if engine == "sglang":
        return f"hit {o.hit:,}" + (f" at the node ending at token {o.hit:,}" if o.hit else "")
    if not o.hit:
        return "hit 0"
    if o.grid:
        return (f"hit {o.hit:,}: the Mamba state cached at token {o.hit:,} (the end of block "
                f"{o.hit // unit} of {unit} tokens), and the attention blocks before it")
    return (f"hit {o.hit:,}: every group's blocks up to token {o.hit:,} ({o.hit // unit} blocks "
            f"of {unit})")


def _cut(engine: str, o: Outcome) -> list[str]:
    """What held the hit below attention's, and why, in words."""
    if o.cut_by == MAMBA:
        why = (f"states are kept on its {o.grid:,}-token checkpoint grid"
               if o.hit and o.attention_hit - o.hit < o.grid else
               "no_buffer keeps a state only where a request's own tokens end"
               if not o.keeps_branch else
               "vLLM keeps a state at a prompt's last block boundary and at a junction: "
               "those on this path lie in other requests' own tokens" if engine == "vllm" else
               "the states on this path lie in other requests' own tokens")
        return [f"attention matched {o.attention_hit:,}, but no Mamba state is cached between "
                f"{o.hit:,} and {o.attention_hit:,} ({why})"]
    if o.cut_by == SWA:
        where = ("no window of blocks is cached before it (vLLM keeps a window's blocks only "
                 "before a prompt's end or a junction)" if engine == "vllm" else
                 "the window before it is tombstoned (its SWA KV freed as the window passed)")
        return [f"attention matched {o.attention_hit:,}, but {where}: the hit falls back to "
                f"{o.hit:,}"]
    if o.cut_by == "intersection":
        return [f"attention matched {o.attention_hit:,}; the groups' intersection cut it to "
                f"{o.hit:,}"]
    return []


def explain_model(trace: Trace, preset: ModelPreset, a: EngineAssumptions | None = None,
                  top: int = 10, progress: Progress | None = None, budget: int | None = None
                  ) -> dict[str, Any]:
    """Both engines' buckets over `trace` on `preset`: {"model", "prompt_tokens",
    "engines": {engine: {"totals", "rows", "top_losers", "run"}}}. Rows in trace order;
    `progress` and `budget` as run_side's."""
    a = a or EngineAssumptions()
    outputs = [output_tokens(trace, i) for i in range(len(trace.requests))]
    result: dict[str, Any] = {"model": preset.name,
                              "prompt_tokens": sum(prompt_lens(trace)), "engines": {}}
    for engine in ("sglang", "vllm"):
        watch = Watch(engine, outputs)
        totals = run_side(engine, trace, preset, a, outputs=outputs, on_outcome=watch,
                          progress=progress, budget=budget)
        rows = watch.rows
        buckets = {b: sum(r.buckets[b] for r in rows) for b in HYBRID_BUCKETS}
        losers = sorted(rows, key=lambda r: (-lost(r.buckets), r.index))[:top]
        result["engines"][engine] = {"totals": buckets, "run": totals, "rows": rows,
                                     "top_losers": [r for r in losers if lost(r.buckets)]}
    return result


class Watch:
    """`on_outcome` for run_side: each request's row, against a trie of what ran before it
    (its prompt and all but the last output token: what the engine computed)."""

    def __init__(self, engine: str, outputs: Sequence[Sequence[int]]) -> None:
        self.engine, self.outputs = engine, outputs
        self.seen, self.stored, self.rows = PrefixTrie(), PrefixTrie(), []

    def __call__(self, req: Req, o: Outcome) -> None:
        i, seen = len(self.rows), self.seen
        prompt, n = req.origin_input_ids, o.prompt_tokens
        ns = namespace(req, self.engine == "vllm")
        shared, seen_any = seen.known(prompt, ns, n), seen.known(prompt, ANY, n)
        stored = self.stored.known(prompt, ns, n) if self.engine == "sglang" else None
        b = split(o, shared, seen_any, stored)
        self.rows.append(HybridRow(req.rid, i, b, o, decided(self.engine, o, b)))
        if not o.rejected:
            out = self.outputs[i]
            ran = joined(prompt, out[:max(len(out) - 1, 0)])
            seen.insert(ran, ns, len(ran))
            seen.insert(ran, ANY, len(ran))
            if self.engine == "sglang":  # the tree holds what its insert reached
                self.stored.insert(ran, ns, min(req.cache_inserted_len, len(ran)))


def lost(buckets: dict[str, int]) -> int:
    """Tokens that were reusable but prefilled: all but hit, first seen and rejected."""
    return sum(buckets.values()) - buckets["hit"] - buckets["first_seen"] - buckets["rejected"]


def why_model(history: Sequence[TraceRequest], b: TraceRequest, preset: ModelPreset,
              a: EngineAssumptions | None = None) -> dict[str, HybridRow]:
    """B's row on each engine after `history` ran, one request at a time (`why --model`).

    Qwen3.5 at block 576, A = 1,600 shared + 600 own, B = the same shared part + 600 others:
    vLLM's attention matches 1,152, no Mamba state: 0, and B pins the junction at 1,152.
    >>> from radix.models import load_preset
    >>> s, own = tuple(range(1600)), lambda k: tuple(range(k * 10**6, k * 10**6 + 600))
    >>> rows = why_model([TraceRequest("A", 0, s + own(1), 1)], TraceRequest("B", 1, s + own(2),
    ...                  1), load_preset("qwen3.5-4b"))
    >>> o = rows["vllm"].outcome; o.hit, o.attention_hit, o.junction
    (0, 1152, 1152)
    """
    trace = Trace("request", [*history, b])
    e = explain_model(trace, preset, a, top=0)
    return {engine: side["rows"][-1] for engine, side in e["engines"].items()}
