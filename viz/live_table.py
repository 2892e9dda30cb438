"""The per-request table of the Live engine page, and its totals.

Measured columns come from the engine's metrics (engine/scheduler.py): matched and prefilled
tokens, TTFT, decode tokens/s on this machine's model. Derived columns price the matched tokens
for Llama-3-8B on an H100 (engine/costs.py): the prefill a hit saves there, and its KV bytes.
Leaves out: block-cache numbers (the engine records `block_matched_tokens`; not shown here).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix.runs.costs import CostModel

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
