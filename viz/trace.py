"""The Trace debugger's words and tables: the summary with units, rejections, an op log's story.

Reads a `scenarios.trace.TraceReplay` (duck-typed). The summary puts both caches side by side in
the same units: tokens with separators, hit rates in percent, evictions counted in tokens for
both (the tree frees whole leaves, the block cache 16-token blocks), bytes at Llama-3-8B's
128 KiB a token (derived); rejected requests are listed with their reason. Big trees:
`text_head` cuts pretty_print's text for the page (the whole text goes to a download); the
step's narration and caption here (`step_lines`, `step_caption`, from viz/words.py's
sentences), its roles viz/roles.py's (`step_highlight`).
Leaves out: the replay itself (scenarios/trace.py) and drawing (viz/scene.py, viz/blocks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from radix import events as ev
from radix.runs.costs import CostModel
from radix.traces.hashview import block_label
from radix.traces.trace import COMPACT_OUTPUT_BASE, OUTPUT_BASE
from viz.recording import span
from viz.words import build_owners, narrate

NA = "-"


def _tokens(n: int | None) -> str:
    return NA if n is None else f"{n:,} tokens"


def summary_rows(stats: dict[str, dict], block_size: int, cost: CostModel | None = None
                 ) -> dict[str, list[str]]:
    """Both caches' totals as table columns, each number with its unit.

    A tree that evicted 3 leaves of 4,000 tokens in all, beside a block cache that evicted 250
    blocks: "4,000 tokens (3 leaves)" and "4,000 tokens (250 blocks of 16)".
    """
    cost = cost or CostModel()
    tree, blocks = stats.get("tree") or {}, stats.get("blocks") or {}

    def row(label: str, fmt: Any) -> tuple[str, str, str]:
        return label, fmt(tree, "tree"), fmt(blocks, "blocks")

    def get(s: dict, k: str) -> Any:
        return s.get(k) if s else None

    rows = [
        row("requests served", lambda s, _: NA if not s else f"{s['requests']:,}"),
        row("requests rejected", lambda s, _: NA if not s else f"{s['rejected']:,}"),
        row("prompt tokens (admitted requests)", lambda s, _: _tokens(get(s, "prompt_tokens"))),
        row("prompt tokens (rejected requests)",
            lambda s, _: _tokens(get(s, "rejected_prompt_tokens"))),
        row("hit (reused) tokens", lambda s, _: _tokens(get(s, "hit_tokens"))),
        # over the admitted requests' prompts (the engines' own counters), then over every
        # prompt of the trace, rejected ones included: equal when nothing was rejected
        row("hit rate, admitted prompts", lambda s, _: NA if not s else f"{s['hit_rate']:.1%}"),
        row("hit rate, all prompts", lambda s, _: NA if not s or "hit_rate_all" not in s
            else f"{s['hit_rate_all']:.1%}"),
        row("prefilled tokens", lambda s, _: _tokens(get(s, "prefilled_tokens"))),
        row("prefill time saved (derived)", lambda s, _: NA if not s else
            f"{cost.prefill_seconds(s['hit_tokens']):,.1f} s"),
        row("evicted", lambda s, w: NA if not s else (
            f"{s['evicted_tokens']:,} tokens ({s['evictions']:,} leaves)" if w == "tree" else
            f"{s['evicted_tokens']:,} tokens ({s['evictions']:,} blocks of {block_size})")),
        row("unreachable blocks", lambda s, w: "not a block cache" if w == "tree" else
            NA if not s or s.get("unreachable_blocks") is None
            else f"{s['unreachable_blocks']:,} blocks"),
    ]
    return {"": [r[0] for r in rows], "radix tree (SGLang)": [r[1] for r in rows],
            "block cache (vLLM)": [r[2] for r in rows]}


def id_labels(trace: Any, max_blocks: int = 6) -> Callable[[Any], str] | None:
    """How a node's tokens are shown: a Mooncake trace's as its hash ids (not hash x 512 + k);
    None (token ids as they are) for every other trace."""
    if getattr(trace, "format", None) != "mooncake":
        return None
    return lambda tokens: block_label(tokens, max_blocks)


def rejection_rows(rejections: list[Any]) -> list[dict[str, str]]:
    """One row per rejected request: which cache refused it and why."""
    return [{"request": r.rid, "cache": r.cache, "why": r.reason} for r in rejections]


def op_summary(replay: Any) -> str:
    """What a valid op log did: its ops by name and the tree it left (never "0 requests")."""
    counts = replay.op_counts or {}
    ops = ", ".join(f"{n:,} {name}" for name, n in sorted(counts.items(), key=lambda x: -x[1]))
    snap = replay.log.snapshot_at(replay.log.num_steps)
    checked = ("after every op" if replay.checked_every == 1 else
               f"every {replay.checked_every} ops and after the last")
    return (f"{sum(counts.values()):,} ops ({ops}); {replay.log.num_steps:,} cache steps. The "
            f"tree ends with {len(snap.nodes) - 1:,} nodes holding {snap.total_size:,} tokens "
            f"({snap.evictable_size:,} evictable, {snap.protected_size:,} protected). "
            f"Invariants checked {checked}.")


def invariants_text(replay: Any) -> str:
    """How often a request trace's replay checked the tree's invariants, which all held.

    >>> from types import SimpleNamespace as NS
    >>> invariants_text(NS(checked_every=1))
    'Invariants held after every request.'
    >>> invariants_text(NS(checked_every=13))
    'Invariants held, checked every 13 requests and after the last.'

    """
    if replay.checked_every == 1:
        return "Invariants held after every request."
    return f"Invariants held, checked every {replay.checked_every:,} requests and after the last."


def failure_text(f: Any) -> str:
    """The failing op of an op log, the rule it broke and the step shown."""
    return (f"The op on line {f.line:,} (\"{f.op}\") failed: {f.error}. The rule it breaks: "
            f"{f.rule}. Shown: the tree after the last good step ({f.last_good_step:,}).")


def text_head(text: str, max_lines: int = 200) -> tuple[str, str | None]:
    """The first `max_lines` lines of `text`, and a note saying how many were left out (None
    when nothing was): 1,000 lines, 200 kept -> "first 200 of 1,000 lines; …"."""
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text, None
    return ("\n".join(lines[:max_lines]),
            f"first {max_lines:,} of {len(lines):,} lines; download the whole text below")


def kv_events_summary(trace: Any) -> str:
    """What a vLLM KV-events recording holds, in totals (the fold, viz/recording.py, says what
    its pool ends with); times readable (viz.recording.span).

    examples/traces/kv_events.jsonl: 3 batches (ts 0 .. 2), 3 BlockStored events storing 271
    blocks (x 16 = 4,336 tokens), 22 BlockRemoved events removing 22 blocks, 0 AllBlocksCleared.
    """
    batches = trace.batches or []
    events = [e for b in batches for e in b.events]
    stored = [e for e in events if type(e).__name__ == "BlockStored"]
    removed = [e for e in events if type(e).__name__ == "BlockRemoved"]
    cleared = len(events) - len(stored) - len(removed)
    blocks = sum(len(e.block_hashes) for e in stored)
    tokens = sum(len(e.block_hashes) * e.block_size for e in stored)
    times = f" (ts {span(batches[0].ts, batches[-1].ts)})" if batches else ""
    return (f"{len(batches):,} batches{times}: {len(stored):,} BlockStored events storing "
            f"{blocks:,} blocks ({tokens:,} tokens), {len(removed):,} BlockRemoved events removing "
            f"{sum(len(e.block_hashes) for e in removed):,} blocks, {cleared:,} AllBlocksCleared. "
            "A KV-events recording has block hashes, not requests: no request steps to scrub, "
            "but the pool it ends with, below.")


def synthetic_ids_note(snapshot: Any) -> str | None:
    """Why some token ids are huge, when the tree holds any: a trace that gives only output
    lengths gets replies made of ids no prompt uses (radix/traces/trace.py), from 2**40 for token
    traces and from 2**63 for Mooncake's compact ones. None when every id is a trace's own.

    A reply of request #3 (plain trace): 2**40 + (3 << 20) + j = 1,099,514,773,504 + j.
    """
    # a path holds a prompt, then its reply: a node holding reply ids ends with one
    top = max((n.token_ids[-1] for n in snapshot.nodes if len(n.token_ids)), default=0)
    if top < OUTPUT_BASE:
        return None
    base, shift = ((COMPACT_OUTPUT_BASE, 21) if top >= COMPACT_OUTPUT_BASE else (OUTPUT_BASE, 20))
    return (f"Ids from {base:,} up are made-up output tokens: the trace gives only each reply's "
            f"length, so request #i's reply is {base:,} + (i << {shift}) + j for its j-th token, "
            "ids no prompt uses. They are what the cache holds after a finish (prompt + reply); "
            "only a later request that repeats the reply could hit them.")


def step_caption(events: list[Any], num_steps: int | None = None) -> str:
    """The step just played, numbered one way only, as the step box counts (steps done, from
    1), out of the log's `num_steps` (issue 41: "step 41,848 ... (the cache's step #41,847)"
    gave one step two numbers).

    >>> e = [ev.StepStarted(11, "cache_finished_req", "R5")] + [None] * 6
    >>> step_caption(e, 40)
    'step 12 of 40: R5 cache_finished_req (7 events)'
    """
    first = events[0]
    rid = f" {first.rid}" if getattr(first, "rid", None) else ""
    of = f" of {num_steps:,}" if num_steps is not None else ""
    return f"step {first.step + 1:,}{of}:{rid} {first.op} ({len(events):,} events)"


def step_lines(log: Any, step: int, owners: dict[int, str] | None = None,
               max_lines: int = 40) -> list[str]:
    """The narration of log step `step` (0-based), one line per micro-event that says something
    (`narrate`; a finish's prompt-boundary split says so), the first `max_lines` of them.
    `owners`: node id -> rid (build_owners over the log; built here when None)."""
    events = log.events_of(step)
    first = events[0]
    if owners is None:
        owners = build_owners(log.steps)
    model = log.model_at(step)
    micro = log.micro_events(step)
    key_len = next((e.key_len for e in micro if isinstance(e, ev.PrefixMatched)), None)
    # numbered as the step box counts (from 1), as step_caption does
    lines = [narrate(replace(first, step=first.step + 1), model, owners, first.rid)]
    for k, e in enumerate(micro):
        if len(lines) >= max_lines:
            lines.append(f"... {len(micro) - k:,} more events")
            break
        if not isinstance(e, ev.NodesTouched | ev.LeafSetChanged):
            lines.append(narrate(e, model, owners, first.rid, key_len, op=first.op,
                                 earlier=micro[:k]))
        model.apply(e)
    return lines
