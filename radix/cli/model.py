"""What `compare`, `configs` and `explain` print with `--model`: the hybrid runs of
radix/runs/hybrid.py and hybrid_explain.py as tables, the assumptions said and the alternatives
named. The JSON forms are the runs' own dicts (`explain_json` makes the rows plain).
Leaves out: running anything (the commands call the runs).
"""

from __future__ import annotations

from typing import Any

from radix.runs.hybrid_explain import HYBRID_BUCKETS

ENGINES = (("sglang", "SGLang 0.5.23"), ("vllm", "vLLM 0.33"))
CUT_LABELS = {"mamba": "no Mamba state there", "sliding_window": "window freed/tombstoned",
              "intersection": "groups' intersection"}
ROWS = (("requests run", "requests"), ("rejected (too big)", "rejected"),
        ("prompt tokens (admitted)", "prompt_tokens"),
        ("prompt tokens (rejected)", "rejected_prompt_tokens"), ("hit tokens", "hit_tokens"),
        ("hit rate (admitted prompts)", "hit_rate"), ("hit rate (all prompts)", "hit_rate_all"),
        ("tokens prefilled", "prefilled_tokens"),
        ("full attention alone would hit", "attention_hit_tokens"))
LABELS = {"hit": "hit", "evicted": "evicted (capacity)", "last_token_cap": "last-token cap",
          "block_rounding": "block rounding", "block_floor": "block floor (< 1 block)",
          "not_stored": "never stored (no state)",
          "mamba_checkpoint": "no Mamba state there", "sliding_window": "outside the window",
          "intersection": "cut by intersection", "other_namespace": "other namespace",
          "first_seen": "first seen (compulsory)", "rejected": "rejected (too big)"}


def _cell(v: Any, rate: bool) -> str:
    return "-" if v is None else f"{v:.1%}" if rate else f"{v:,}"


def assumption_lines(desc: dict[str, list[str]]) -> list[str]:
    """The assumptions as the output says them (engines.describe's dict)."""
    return [f"assumed, SGLang: {'; '.join(desc['sglang'])}",
            f"assumed, vLLM: {'; '.join(desc['vllm'])}",
            f"assumed, both: {'; '.join(desc['both'])}",
            f"other choices: {'; '.join(desc['others'])}"]


def pool_line(engine: str, pools: dict[str, Any]) -> str:
    if engine == "vllm":
        kinds = " ".join(k[0].upper() for k in pools["groups"])
        return (f"vLLM pool: {pools['num_blocks']:,} blocks of {pools['block_size']} tokens, "
                f"groups {kinds}")
    parts = [f"{pools['full_tokens']:,} full tokens (page {pools['page_size']})"]
    if pools["swa_tokens"] is not None:
        parts.append(f"{pools['swa_tokens']:,} SWA tokens")
    if pools["mamba_slots"] is not None:
        parts.append(f"{pools['mamba_slots']:,} Mamba state slots "
                     f"({pools['mamba_radix_cache_strategy']})")
    return "SGLang pools: " + ", ".join(parts)


def format_compare(result: dict[str, Any]) -> str:
    """compare_model's result, metrics down, the two engines across."""
    lines = [f"{'model ' + result['model']:32}" + "".join(f"{t:>16}" for _, t in ENGINES)]
    for label, key in ROWS:
        lines.append(f"{label:32}" + "".join(
            f"{_cell(result[e][key], key.startswith('hit_rate')):>16}" for e, _ in ENGINES))
    kinds = sorted({k for e, _ in ENGINES for k in result[e]["cut"]})
    for k in kinds:
        lines.append(f"{'  held back: ' + CUT_LABELS.get(k, k):32}" + "".join(
            f"{result[e]['cut'].get(k, 0):>16,}" for e, _ in ENGINES))
    if result["vllm"]["junctions"]:
        lines.append(f"{'junctions pinned (vLLM)':32}{'-':>16}{result['vllm']['junctions']:>16,}")
    lines += [pool_line(e, result[e]["pools"]) for e, _ in ENGINES]
    return "\n".join(lines + assumption_lines(result["assumptions"]))


def format_configs(model: str, runs: list[tuple[str, dict[str, Any]]],
                   desc: dict[str, list[str]]) -> str:
    """Each engine configuration that changes the answer, side by side."""
    width = max(16, *(len(name) + 2 for name, _ in runs))
    lines = [f"{'model ' + model:32}" + "".join(f"{name:>{width}}" for name, _ in runs)]
    for label, key in ROWS:
        lines.append(f"{label:32}" + "".join(
            f"{_cell(t[key], key.startswith('hit_rate')):>{width}}" for _, t in runs))
    return "\n".join(lines + assumption_lines(desc))


def format_explain(e: dict[str, Any], top: int) -> str:
    """explain_model's result: buckets side by side, then each engine's biggest losers with
    what decided them."""
    n = e["prompt_tokens"]
    lines = [f"{n:,} prompt tokens in {len(e['engines']['vllm']['rows']):,} requests on "
             f"{e['model']}", "", f"{'bucket':26}" + "".join(f"{t:>22}" for _, t in ENGINES)]
    for b in HYBRID_BUCKETS:
        cells = [e["engines"][k]["totals"][b] for k, _ in ENGINES]
        lines.append(f"{LABELS[b]:26}" + "".join(
            f"{(f'{c:,} ({c / n:.1%})' if n else f'{c:,}'):>22}" for c in cells))
    for k, title in ENGINES:
        side = e["engines"][k]
        lines += ["", pool_line(k, side["run"]["pools"]),
                  f"requests that lost the most ({title}: reusable tokens prefilled)"]
        for r in side["top_losers"][:top]:
            lines.append(f"  {r.rid:<12} {r.decided}")
    if e.get("what_if"):
        lines += ["", "the other engine configurations (hit rate, all prompts)"]
        lines += [f"  {name:<40}{t['hit_rate_all']:>9.1%}" for name, t in e["what_if"]]
    return "\n".join(lines + [""] + assumption_lines(e["assumptions"]))


def explain_json(e: dict[str, Any]) -> dict[str, Any]:
    """explain_model's result as plain JSON: each row's buckets, outcome and words."""
    out = {k: v for k, v in e.items() if k != "engines"}
    out["engines"] = {}
    for k, side in e["engines"].items():
        rows = [{"rid": r.rid, "index": r.index, "buckets": r.buckets,
                 "outcome": r.outcome._asdict(), "decided": r.decided} for r in side["rows"]]
        out["engines"][k] = {"totals": side["totals"], "run": side["run"], "requests": rows,
                             "top_losers": [r.rid for r in side["top_losers"]]}
    if "what_if" in out:
        out["what_if"] = [{"config": name, **t} for name, t in out["what_if"]]
    return out
