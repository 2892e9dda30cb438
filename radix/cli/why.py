"""`python -m radix why A B`: why prompt B misses the cache after prompt A, on token ids.

Without a tokenizer (radix/ loads none), A and B are token-id lists (JSON) or request ids of a
token trace. Text, chat messages and text traces go through `python -m engine why A B` (same
arguments), which tokenizes with the model's tokenizer and calls the same code (radix/why/).
`--model PRESET`: B after A (with `--trace`, after the trace's requests before B) on a hybrid
model's caches in both engines, and what decided its hit (radix/runs/hybrid_explain.py).
Leaves out: the work itself (radix/why/, radix/runs/).
"""

from __future__ import annotations

import argparse
from typing import Any

from radix.cli.model_options import add_model, model_from
from radix.why.command import add_arguments
from radix.why.command import run as run_why


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("why", help="why prompt B misses after prompt A (token ids)")
    add_arguments(p)
    add_model(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = model_from(args)
    if model is None:
        return run_why(args, None)
    preset, assumptions = model

    def hybrid(history: list[Any], a: Any, b: Any) -> tuple[list[str], dict[str, Any]]:
        return hybrid_lines(history, b, preset, assumptions)
    return run_why(args, None, hybrid)


def hybrid_lines(history: list[Any], b: Any, preset: Any, assumptions: Any
                 ) -> tuple[list[str], dict[str, Any]]:
    """B on both engines of `preset` after `history` (Prompts or TraceRequests): the report's
    lines and its JSON."""
    from radix.cli.model import ENGINES, LABELS, assumption_lines
    from radix.models.engines import describe
    from radix.runs.hybrid_explain import why_model
    from radix.traces import TraceRequest

    def request(p: Any, i: int) -> Any:
        if isinstance(p, TraceRequest):
            return p
        return TraceRequest(f"{p.label}#{i}", float(i), list(p.token_ids), 1, p.extra_key or None,
                            p.cache_salt or None)

    reqs = [request(p, i) for i, p in enumerate(history)]
    rows = why_model(reqs, request(b, len(reqs)), preset, assumptions)
    before = "A" if len(reqs) == 1 else f"the {len(reqs):,} requests before it"
    lines = [f"what each engine does with B on {preset.name} once {before} ran:"]
    out: dict[str, Any] = {"model": preset.name, "requests_before": len(reqs), "engines": {}}
    for engine, title in ENGINES:
        r = rows[engine]
        o = r.outcome
        lost = ", ".join(f"{LABELS[k]} {v:,}" for k, v in r.buckets.items()
                         if v and k not in ("hit", "first_seen"))
        lines += [f"  {title}: reuses {o.hit:,} of {o.prompt_tokens:,}, prefills "
                  f"{o.prompt_tokens - o.hit:,}" + (f" (lost: {lost})" if lost else ""),
                  f"    {r.decided}"]
        out["engines"][engine] = {"buckets": r.buckets, "outcome": o._asdict(),
                                  "decided": r.decided}
    lines += ["  " + line for line in assumption_lines(describe(preset, assumptions))]
    out["assumptions"] = describe(preset, assumptions)
    return lines, {"hybrid": out}
