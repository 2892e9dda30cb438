"""A seeded stand-in for Mooncake's conversation trace (FAST'25), which is not shipped here.

The real one (kvcache-ai/Mooncake FAST25-release, Apache-2.0): 12,031 requests in an hour, 144.8 M
prompt tokens (12,035 a request), ~343 output tokens a request. This writes Mooncake-format lines
with those statistics: multi-turn sessions, each turn extending its previous turn's full blocks,
opened by a few Zipf-popular shared system prompts; long-tailed lengths; users think ~45 s
between turns. Same seed, same bytes: `python -m examples.mooncake_conversation OUT.jsonl`.
Leaves out: whatever else the real sessions do (the trace has no text); tool calls.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

BLOCK = 512  # Mooncake's block size
REQUESTS = 12_031
PROMPT_TOKENS = 144_800_000
OUTPUT_MEAN = 343
DURATION_MS = 3_600_000
SYSTEM_PROMPTS = 8  # shared openers, block counts 2..12, popularity ~ 1/rank


def _sessions(rng: random.Random, requests: int, scale: float) -> list[list[tuple[int, int]]]:
    """Turns per session as (new context tokens, reply tokens); `scale` multiplies the
    context sizes so that the prompt total can be hit."""
    sessions: list[list[tuple[int, int]]] = []
    left = requests
    while left > 0:
        turns = min(left, 1 + int(rng.expovariate(1 / 3.5)))  # mean ~4 turns
        session = []
        for t in range(turns):
            first = t == 0
            # the first turn brings documents / history (long tail); later turns a message
            mu = 8.6 if first else 6.3
            context = int(scale * rng.lognormvariate(mu, 1.0)) + 16
            reply = max(1, min(4096, int(rng.lognormvariate(math.log(OUTPUT_MEAN) - 0.5, 1.0))))
            session.append((context, reply))
        sessions.append(session)
        left -= turns
    return sessions


def generate(seed: int = 0, requests: int = REQUESTS, prompt_tokens: int = PROMPT_TOKENS,
             duration_ms: int = DURATION_MS) -> list[dict]:
    """Mooncake-format lines, sorted by timestamp.

    >>> lines = generate(seed=1, requests=40, prompt_tokens=400_000)
    >>> len(lines), abs(sum(x["input_length"] for x in lines) - 400_000) < 4_000
    (40, True)
    """
    lo, hi = 0.01, 100.0
    for _ in range(40):  # the context scale that makes the prompts add up to prompt_tokens
        mid = math.sqrt(lo * hi)
        total = sum(x["input_length"] for x in _lines(seed, requests, mid, duration_ms))
        lo, hi = (mid, hi) if total < prompt_tokens else (lo, mid)
    return _lines(seed, requests, math.sqrt(lo * hi), duration_ms)


def _lines(seed: int, requests: int, scale: float, duration_ms: int) -> list[dict]:
    rng = random.Random(seed)
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    systems = [fresh(rng.randint(2, 12)) for _ in range(SYSTEM_PROMPTS)]
    weights = [1 / (k + 1) for k in range(SYSTEM_PROMPTS)]
    out = []
    for session in _sessions(rng, requests, scale):
        ids = list(rng.choices(systems, weights)[0])
        length = len(ids) * BLOCK
        ms = rng.uniform(0, duration_ms * 0.9)
        for context, reply in session:
            # the previous turn's partial last block changes: drop its id, keep its full blocks
            ids = ids[:length // BLOCK]
            length += context
            ids += fresh(math.ceil(length / BLOCK) - len(ids))
            out.append({"timestamp": int(ms), "input_length": length, "output_length": reply,
                        "hash_ids": list(ids)})
            length += reply  # the reply joins the next turn's prompt
            ms += rng.expovariate(1 / 45_000)  # the user reads and types for ~45 s
    out.sort(key=lambda x: x["timestamp"])
    return out


def write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(x, separators=(", ", ": ")) + "\n" for x in lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.mooncake_conversation",
                                description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--requests", type=int, default=REQUESTS)
    p.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    write(args.out, generate(args.seed, args.requests, args.prompt_tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
