"""Per-request cost of the hybrid block cache (radix/blocks/kv_cache_manager.py) beside our
full-attention BlockCacheManager on the same trace, in one process.

Trace: 2,000 requests, 16 running at once (the oldest freed when a 17th starts); a prompt is
one of 8 system prompts (1,024 tokens) + its own 100-900 tokens; each request is looked up,
prefilled (cut by the Mamba split where the layout has one) and decodes 4 tokens. Caches:
`BlockCacheManager` over a BlockPool of 16-token blocks (the baseline); `KVCacheManager` on
Llama-3-8B's layout (one full-attention group, 16-token blocks: the same work, through the
hybrid coordinator), gpt-oss-20b (window + full), Gemma-3-27B (6 window groups + full) and
Qwen3.5-4B (3 Mamba groups + full, 576-token blocks). Pools are sized so nothing is evicted
beyond what 16 live requests force. Rounds interleave the caches; the median of the rounds'
microseconds per request is reported, with the ratio to the baseline in the same round.

    python benchmarks/hybrid_blocks.py [--requests 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix.blocks.manager import BlockCacheManager  # noqa: E402
from radix.blocks.pool import BlockPool  # noqa: E402
from radix.models import load_preset, vllm_layout  # noqa: E402
from radix.request import Req  # noqa: E402

HYBRID = ("llama-3-8b", "gpt-oss-20b", "gemma-3-27b", "qwen3.5-4b")
RUNNING, DECODE = 16, 4


def make_prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    systems = [list(range(s * 2000, s * 2000 + 1024)) for s in range(8)]
    out = []
    for i in range(n):
        own = 1_000_000 + i * 1000
        out.append(systems[rng.randrange(8)] + list(range(own, own + rng.randint(100, 900))))
    return out


def run_baseline(prompts: list[list[int]]) -> float:
    """Seconds for the whole trace on BlockCacheManager (block 16)."""
    m = BlockCacheManager(BlockPool(RUNNING * 140 + 600, block_size=16))
    live: list[Req] = []
    t0 = time.perf_counter()
    for i, tokens in enumerate(prompts):
        if len(live) == RUNNING:
            m.free(live.pop(0))
        req = Req(f"r{i}", tokens)
        hit = m.get_computed_blocks(req)
        m.allocate_slots(req, len(tokens) - hit.num_computed_tokens, hit)
        for k in range(DECODE):
            req.output_ids.append(k)
            m.allocate_slots(req, 1)
        live.append(req)
    for req in live:
        m.free(req)
    return time.perf_counter() - t0


def run_hybrid(prompts: list[list[int]], preset: str) -> float:
    """Seconds for the whole trace on KVCacheManager over `preset`'s vLLM layout."""
    layout = vllm_layout(load_preset(preset))
    per_group = -(-2000 // layout.block_size) + 2
    m = layout.manager(RUNNING * per_group * len(layout.groups) + 600)
    live: list[Req] = []
    t0 = time.perf_counter()
    for i, tokens in enumerate(prompts):
        if len(live) == RUNNING:
            m.free(live.pop(0))
        m.new_step_starts()
        req = Req(f"r{i}", tokens)
        hit = m.get_computed_blocks(req)
        done, first = hit.num_computed_tokens, True
        while done < len(tokens):
            n = m.mamba_block_aligned_split(req, len(tokens) - done,
                                            hit.num_computed_tokens if first else 0)
            m.allocate_slots(req, n, hit if first else None, first)
            done += n + (hit.num_computed_tokens if first else 0)
            first = False
        for k in range(DECODE):
            req.output_ids.append(k)
            m.allocate_slots(req, 1)
        live.append(req)
    for req in live:
        m.free(req)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    prompts = make_prompts(args.requests, 0)
    names = ["BlockCacheManager"] + [f"KVCacheManager/{p}" for p in HYBRID]
    us: dict[str, list[float]] = {n: [] for n in names}
    ratio: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.rounds):
        gc.collect()
        base = run_baseline(prompts)
        us[names[0]].append(base / args.requests * 1e6)
        ratio[names[0]].append(1.0)
        for preset in HYBRID:
            gc.collect()
            t = run_hybrid(prompts, preset)
            us[f"KVCacheManager/{preset}"].append(t / args.requests * 1e6)
            ratio[f"KVCacheManager/{preset}"].append(t / base)
    rows = {n: {"us_per_request": round(statistics.median(us[n]), 1),
                "x_baseline": round(statistics.median(ratio[n]), 2),
                "x_range": [round(min(ratio[n]), 2), round(max(ratio[n]), 2)]} for n in names}
    print(json.dumps({"requests": args.requests, "rounds": args.rounds, "results": rows},
                     indent=1))
    print(f"\n{'cache':36} {'us/request':>11} {'x baseline':>11}  (min..max round)")
    for n, r in rows.items():
        print(f"{n:36} {r['us_per_request']:11.1f} {r['x_baseline']:11.2f}  "
              f"({r['x_range'][0]:.2f}..{r['x_range'][1]:.2f})")


if __name__ == "__main__":
    main()
